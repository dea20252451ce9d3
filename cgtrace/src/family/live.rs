//! The live half of the registry: how each family of [`FAMILIES`](super::FAMILIES) runs — what
//! the loader attaches for it and the collector the session starts once it is attached. Offline
//! code (recordings, replay, report) reads only [`FAMILIES`](super::FAMILIES), so it never
//! reaches BPF; both lists name the same families in the same order (checked below).

use crate::{
    bpf::attach::{Attach, LoadError},
    family::{
        collect::{Collector, Start},
        info::FamilyInfo,
        reads, runq, throttle,
    },
    model::FamilyMode,
};

/// A family as the live session runs it.
pub struct LiveFamily {
    pub info: &'static FamilyInfo,
    /// Attaches its programs in the best mode this kernel allows (or says why it is
    /// unavailable); the loader calls it once the object is loaded.
    pub attach: fn(&mut Attach<'_>) -> Result<FamilyMode, LoadError>,
    /// Its collector, once its programs are attached.
    pub start: fn(&mut Start<'_>) -> anyhow::Result<Box<dyn Collector>>,
}

/// Every family this build can trace, in registry order.
pub const LIVE: &[LiveFamily] = &[
    LiveFamily {
        info: &runq::INFO,
        attach: runq::attach::attach,
        start: runq::collect::start,
    },
    LiveFamily {
        info: &throttle::INFO,
        attach: throttle::attach::attach,
        start: throttle::collect::start,
    },
    LiveFamily {
        info: &reads::INFO,
        attach: reads::attach::attach,
        start: reads::collect::start,
    },
];

#[cfg(test)]
mod tests {
    #[test]
    fn the_live_families_are_the_registry_s_in_its_order() {
        let live: Vec<&str> = super::LIVE.iter().map(|f| f.info.name).collect();
        let all: Vec<&str> = crate::family::FAMILIES.iter().map(|f| f.name).collect();
        assert_eq!(live, all);
    }
}
