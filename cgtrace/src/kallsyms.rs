//! Kernel symbol addresses from `/proc/kallsyms` (root sees real addresses).

use std::{collections::HashMap, path::Path};

/// Addresses of the wanted symbols; a symbol the compiler cloned (`name.isra.0`,
/// `name.constprop.0`) counts as the symbol.
pub fn lookup(path: &Path, wanted: &[&str]) -> std::io::Result<HashMap<String, u64>> {
    let text = std::fs::read_to_string(path)?;
    Ok(parse(&text, wanted))
}

fn parse(text: &str, wanted: &[&str]) -> HashMap<String, u64> {
    let mut found = HashMap::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(addr), Some(_kind), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let base = name.split('.').next().unwrap_or(name);
        if !wanted.contains(&base) || found.contains_key(base) {
            continue;
        }
        if let Ok(a) = u64::from_str_radix(addr, 16)
            && a != 0
        {
            found.insert(base.to_string(), a);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_exact_and_cloned_symbols_and_ignores_hidden_addresses() {
        let text = "ffffffff813c4ef0 t sched_cfs_period_timer\n\
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
