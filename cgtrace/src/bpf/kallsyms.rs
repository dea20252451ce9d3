//! Kernel symbol addresses from `/proc/kallsyms` (root sees real addresses).

use std::{collections::HashMap, path::Path};

/// Addresses of the wanted symbols. The exact name wins; otherwise a compiler clone that is
/// still an entry point (`name.isra.0`, `name.constprop.0`). Never `.cold` or `.part` pieces,
/// which are parts of a function, not the function.
pub fn lookup(path: &Path, wanted: &[&str]) -> std::io::Result<HashMap<String, u64>> {
    let text = std::fs::read_to_string(path)?;
    Ok(parse(&text, wanted))
}

fn parse(text: &str, wanted: &[&str]) -> HashMap<String, u64> {
    let mut exact = HashMap::new();
    let mut clones = HashMap::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(addr), Some(_kind), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let (base, suffix) = match name.split_once('.') {
            Some((b, s)) => (b, Some(s)),
            None => (name, None),
        };
        if !wanted.contains(&base) {
            continue;
        }
        let Ok(a) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        if a == 0 {
            continue;
        }
        match suffix {
            None => {
                exact.entry(base.to_string()).or_insert(a);
            }
            Some(s) if s.starts_with("isra") || s.starts_with("constprop") => {
                clones.entry(base.to_string()).or_insert(a);
            }
            Some(_) => {}
        }
    }
    for (k, v) in clones {
        exact.entry(k).or_insert(v);
    }
    exact
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_exact_names_takes_clones_and_skips_cold_parts_and_hidden_addresses() {
        let text = "ffffffff81208e4e t sched_cfs_period_timer.cold\n\
                    ffffffff813c4ee0 t __pfx_sched_cfs_period_timer\n\
                    ffffffff813c4ef0 t sched_cfs_period_timer\n\
                    ffffffff813c50d0 t __cfsb_csd_unthrottle.isra.0\n\
                    0000000000000000 t sched_cfs_slack_timer\n\
                    ffffffff81000000 T sched_cfs_period_timer_other\n";
        let m = parse(
            text,
            &[
                "sched_cfs_period_timer",
                "__cfsb_csd_unthrottle",
                "sched_cfs_slack_timer",
            ],
        );
        assert_eq!(m.get("sched_cfs_period_timer"), Some(&0xffffffff813c4ef0));
        assert_eq!(m.get("__cfsb_csd_unthrottle"), Some(&0xffffffff813c50d0));
        assert!(
            !m.contains_key("sched_cfs_slack_timer"),
            "zeroed by kptr_restrict"
        );
    }
}
