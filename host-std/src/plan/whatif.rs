//! The plan's what-ifs (module docs of `plan`): replays of the models that fit on a fresh
//! scratch device, trying the failed model on another logical core, another LNC size, or
//! without the models resident on its core.

use super::*;

impl Replay<'_> {
    /// On a shared device: whether a process of `cfg` (another LNC size: other physical
    /// cores) would be admitted to its cores, as the join judges it on the snapshot
    /// (`PoolSnapshot::check_cores`); the join's message when not.
    fn cores_admitted(&self, cfg: &RuntimeConfig) -> Result<(), String> {
        match (self.shared, cfg.device) {
            (
                Some(snap),
                DeviceChoice::Shared {
                    preset,
                    devices,
                    placement,
                    ..
                },
            ) => snap
                .check_cores(&crate::shared::JoinRequest::for_runtime(
                    preset, devices, placement, cfg,
                ))
                .map_err(|e| e.to_string()),
            _ => Ok(()),
        }
    }

    /// Model `j` as the what-ifs name it: its index and file.
    fn name(&self, j: usize) -> String {
        format!("model #{j} ({})", self.parsed[j].label)
    }

    /// Replays models `0..upto` (those that fit, on the cores they landed on, minus `skip`)
    /// on a fresh scratch device, then tries model `upto` on each of `cores`. Returns, per
    /// core, `Ok(())` or why not; an `Err` when the prefix itself does not replay.
    fn then_try(
        &self,
        upto: usize,
        skip: &[usize],
        cores: &[i64],
    ) -> Result<Vec<Result<(), String>>, String> {
        let s = start(*self.cfg, self.base).map_err(|e| e.to_string())?;
        for (j, p) in self.parsed.iter().enumerate().take(upto) {
            let Some(core) = self.landed[j] else { continue };
            if skip.contains(&j) {
                continue;
            }
            if let Step::Failed { error, .. } = s.step(p, core, self.allow_legacy) {
                return Err(format!("{} no longer fits: {error}", p.label));
            }
        }
        Ok(cores
            .iter()
            .map(
                |&c| match s.step(&self.parsed[upto], c, self.allow_legacy) {
                    Step::Fit {
                        handle, tensors, ..
                    } => {
                        // Undone, so that the next core is tried on the same state: a failed load
                        // rolls back, and freeing a fit gives back exactly its pages.
                        s.undo(handle, &tensors);
                        Ok(())
                    }
                    Step::Failed { error, .. } => Err(error),
                },
            )
            .collect())
    }

    /// [`Self::then_try`] on one core.
    fn then_try_one(&self, upto: usize, skip: &[usize], core: i64) -> Result<(), String> {
        self.then_try(upto, skip, &[core])?
            .pop()
            .unwrap_or(Err(String::new()))
    }

    /// Replays the models that fit before `upto`, then `upto`, in order with default placement
    /// (explicit ones dropped: core numbers change with the LNC size), on a fresh device of
    /// `cfg`: `Ok` when all of them fit.
    fn default_placement(&self, cfg: &RuntimeConfig, upto: usize) -> Result<(), String> {
        let s = start(*cfg, self.base).map_err(|e| e.to_string())?;
        let nrt = s.rt.nrt();
        for (j, p) in self.parsed.iter().enumerate().take(upto + 1) {
            if j < upto && self.landed[j].is_none() {
                continue;
            }
            let core = first_free_core(&nrt);
            if let Step::Failed { error, .. } = s.step(p, core, self.allow_legacy) {
                return Err(format!("{} does not fit on core {core}: {error}", p.label));
            }
        }
        Ok(())
    }
}

/// At most this many resident models are tried one by one when looking for one to leave out.
const MAX_LEAVE_OUT: usize = 8;

/// What would make model `failed` (which did not fit on `core`) fit: another of the `visible`
/// logical cores, another LNC size than `lnc`, fewer resident models on its core.
pub(super) fn what_ifs(
    r: &Replay<'_>,
    failed: usize,
    core: i64,
    visible: i64,
    lnc: u32,
) -> Vec<WhatIf> {
    let mut out = Vec::new();
    let verdict = |change: String, r: Result<(), String>| WhatIf {
        change,
        fits: r.is_ok(),
        detail: r.err(),
    };
    // Another logical core: one fresh replay, each other core tried on it.
    let others: Vec<i64> = (0..visible).filter(|&c| c != core).collect();
    if !others.is_empty() {
        match r.then_try(failed, &[], &others) {
            Ok(rs) => out.extend(
                others
                    .iter()
                    .zip(rs)
                    .map(|(c, x)| verdict(format!("load it on logical core {c}"), x)),
            ),
            Err(e) => out.push(verdict("load it on another logical core".into(), Err(e))),
        }
    }
    // Another LNC size (default placement for every model).
    for size in [1u32, 2, 4, 8].into_iter().filter(|&l| l != lnc) {
        let mut c = *r.cfg;
        c.vcores.lnc_size = Some(size);
        // Not a size this device takes (or the visible cores do not exist then), or one it
        // ignores (the in-force size is another).
        if !start(c, r.base).is_ok_and(|s| s.rt.nrt().logical_core_size() == size) {
            continue;
        }
        out.push(verdict(
            format!("LNC size {size} (default placement for every model)"),
            r.cores_admitted(&c)
                .and_then(|()| r.default_placement(&c, failed)),
        ));
    }
    // Fewer resident models: those on its core, largest first.
    let mut residents: Vec<(usize, u64)> = (0..failed)
        .filter(|&j| r.landed[j] == Some(core))
        .map(|j| (j, r.parsed[j].file.requested_device_bytes()))
        .collect();
    residents.sort_by_key(|&(j, b)| (std::cmp::Reverse(b), j));
    residents.truncate(MAX_LEAVE_OUT);
    let mut single_fit = false;
    for &(j, _) in &residents {
        let x = r.then_try_one(failed, &[j], core);
        single_fit |= x.is_ok();
        out.push(verdict(
            format!("leave out {} (resident on core {core})", r.name(j)),
            x,
        ));
    }
    if !single_fit && residents.len() > 1 {
        for n in 2..=residents.len() {
            let skip: Vec<usize> = residents[..n].iter().map(|&(j, _)| j).collect();
            let x = r.then_try_one(failed, &skip, core);
            let fits = x.is_ok();
            let names: Vec<String> = skip.iter().map(|&j| r.name(j)).collect();
            out.push(verdict(
                format!("leave out {} (resident on core {core})", names.join(", ")),
                x,
            ));
            if fits {
                break;
            }
        }
    }
    out
}
