//! Logical NeuronCores (LNC / vtpb / vnc, spec §9): `parse_vnc_config`, the `virtual_core_t`
//! table, the process's owned slice and the bounds-checked lookup.

#![deny(unsafe_code)]

use crate::abi::meta::zero_in_place;
use crate::abi::*;
use crate::config::{MAX_LNC_SIZE, MAX_VCORES};
use crate::ctx::{DevGeom, Exclusive, InCall, InFlight, Nrt};
use crate::error::{Error, Result, VncRule};

pub use crate::ctx::state::vcore::{VcoreOptions, VcoreTable};
pub use crate::device::{CoreSel, LogicalCore};

/// `parse_vnc_config` (spec §9): the LNC size for a device of `arch` with `nc_per_device`
/// cores, given the requested size. SUNDA forces 1; otherwise the size (default 2) must be
/// non-zero, a power of two no larger than [`MAX_LNC_SIZE`], divide the core count, and on
/// instance types that accept only 2 (MARIANA here) be 2.
pub fn parse_vnc_config(
    arch: al_hal_tpb_arch_type_t,
    nc_per_device: u32,
    requested: Option<u32>,
) -> Result<u32> {
    if arch == al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA {
        return Ok(1);
    }
    let out = requested.unwrap_or(constants::LNC_DEFAULT_SIZE);
    // libnrt's order: the two assertions, then the power-of-two cap, then the instance rule.
    let broken = if out == 0 {
        Some(VncRule::Zero)
    } else if !nc_per_device.is_multiple_of(out) {
        Some(VncRule::Divide {
            cores: nc_per_device,
        })
    } else if !out.is_power_of_two() || out > MAX_LNC_SIZE {
        Some(VncRule::PowerOfTwo { max: MAX_LNC_SIZE })
    } else if arch == al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_MARIANA && out != 2 {
        Some(VncRule::OnlyTwo)
    } else {
        None
    };
    if let Some(rule) = broken {
        return Err(Error::VncConfig { rule, size: out });
    }
    Ok(out)
}

/// The owned slice `(first, count)` of `total` logical cores (spec §9): the visible cores
/// win over `num_cores`; neither means all. A slice past the cores present is
/// [`Error::VisibleCores`].
pub fn visible_slice(o: &VcoreOptions, total: u32) -> Result<(u32, u32)> {
    let (first, count) = match (o.visible, o.num_cores) {
        (Some(v), _) => v,
        (None, Some(c)) if c > 0 => (0, c),
        _ => (0, total),
    };
    if count == 0 || first.checked_add(count).is_none_or(|end| end > total) {
        return Err(Error::VisibleCores {
            first,
            count,
            total,
        });
    }
    Ok((first, count))
}

impl Nrt<'_> {
    /// Builds the owned logical-core slice (bring-up, under init's [`Exclusive`] token).
    pub(crate) fn vcores_init(&self, o: &VcoreOptions, ex: &mut Exclusive<'_>) -> Result<()> {
        let n = self.attached_devices(&*ex);
        let g0: DevGeom = self.dev_geom(&*ex, 0);
        let lnc = parse_vnc_config(g0.arch(), g0.cores, o.lnc_size)?;
        // Cores per device, read before the table is borrowed for writing (which borrows the
        // token mutably).
        let mut cores = [0u32; constants::MAX_MLA_PER_PROCESS];
        let mut total = 0u32;
        for (d, c) in cores.iter_mut().enumerate().take(n as usize) {
            *c = self.dev_geom(&*ex, d as u32).cores;
            total += *c / lnc;
        }
        let (first, count) = visible_slice(o, total)?;
        if count as usize > MAX_VCORES {
            return Err(Error::TooManyVcores(count));
        }
        // Each core's `vcore` pointer names its table entry: addresses only, taken before the
        // table is borrowed for writing (the pointers are stored, never read, here).
        let entry = self.vcore_entry_ptrs();
        let vc = self.vcores_mut(ex);
        zero_in_place(vc);
        vc.lnc_size = lnc;
        vc.num_total = total;
        vc.first_global = first;
        let mut global = 0u32;
        let mut k = 0usize;
        for d in 0..n {
            for l in 0..cores[d as usize] / lnc {
                if global >= first && global < first + count {
                    let v = &mut vc.owned[k];
                    v.vtpb_idx = k as u32;
                    v.vtpb = global;
                    v.nec_dev_id = d;
                    v.num_tpbs = lnc;
                    for j in 0..lnc {
                        let p = &mut v.tpbs[j as usize];
                        p.device_id = d;
                        p.device_tpb_idx = l * lnc + j;
                        p.vcore = entry(k);
                    }
                    k += 1;
                }
                global += 1;
            }
        }
        vc.num_owned = k as u32;
        // The physical cores point back at their logical core (a second pass: the table's
        // borrow has ended, so the token can lend out each core's cell).
        for k in 0..k {
            let v = self.vcores_mut(ex).owned[k];
            for p in v.cores() {
                self.pcore_mut(ex, p.device_id, p.device_tpb_idx).vcore = entry(k);
            }
        }
        Ok(())
    }

    /// Runs `f` inside the state gate, or answers `closed` (the logical-core table is
    /// rewritten by `init` and `close`, so it is only read between them).
    fn gated<R>(&self, closed: R, f: impl FnOnce(&InFlight<'_>) -> R) -> R {
        match self.inspect() {
            Ok(g) => f(&g),
            Err(_) => closed,
        }
    }

    /// Logical cores this process owns (`nrt_get_visible_vnc_count`); 0 while the runtime is
    /// not initialised.
    #[doc(alias = "visible_vnc_count")]
    #[doc(alias = "nrt_get_visible_vnc_count")]
    pub fn visible_logical_core_count(&self) -> u32 {
        self.gated(0, |g| self.vcores(g).num_owned)
    }

    /// [`Self::visible_logical_core_count`] as a step of a gated call (`call`).
    pub(crate) fn owned_vnc_count(&self, call: &impl InCall) -> u32 {
        self.vcores(call).num_owned
    }

    /// Logical cores present on all attached devices (`nrt_get_total_vnc_count`); 0 while the
    /// runtime is not initialised.
    #[doc(alias = "total_vnc_count")]
    #[doc(alias = "nrt_get_total_vnc_count")]
    pub fn total_logical_core_count(&self) -> u32 {
        self.gated(0, |g| self.vcores(g).num_total)
    }

    /// The LNC size in force; 0 while the runtime is not initialised.
    #[doc(alias = "lnc_size")]
    #[doc(alias = "NEURON_RT_VIRTUAL_CORE_SIZE")]
    pub fn logical_core_size(&self) -> u32 {
        self.gated(0, |g| self.vcores(g).lnc_size)
    }

    /// [`Self::logical_core_size`] as a step of a gated call or of `init` (`call`).
    pub(crate) fn lnc(&self, call: &impl InCall) -> u32 {
        self.vcores(call).lnc_size
    }

    /// Logical core `index` if this process owns it (spec §9): the checked constructor.
    /// [`Error::LogicalCoreOutOfRange`] names how many it owns; `Uninitialized` / `Closed`
    /// outside an initialised runtime.
    pub fn logical_core(&self, index: u32) -> Result<LogicalCore> {
        let call = self.enter()?;
        let c = LogicalCore::new(index);
        self.vtpb_get_virtual_core(&call, c).map(|_| c)
    }

    /// The logical cores this process owns, in order (`0..visible_logical_core_count()`, spec §9);
    /// none while the runtime is not initialised.
    pub fn logical_cores(&self) -> impl Iterator<Item = LogicalCore> {
        (0..self.visible_logical_core_count()).map(LogicalCore::new)
    }

    /// The owned logical core `idx` (`vtpb_get_virtual_core`), as a copy read inside the gate.
    /// `Closed` after `close` ([`crate::ledger::Inspector::logical_core_entry`] reads a closed one).
    #[doc(alias = "virtual_core")]
    #[doc(alias = "vtpb_get_virtual_core")]
    pub fn logical_core_entry(&self, idx: LogicalCore) -> Result<virtual_core_t> {
        let call = self.enter()?;
        self.vtpb_get_virtual_core(&call, idx).copied()
    }

    /// The physical cores of owned logical core `idx`, in order (spec §9): what ordinary use
    /// needs of [`Self::logical_core_entry`], without the ABI struct.
    pub fn physical_cores(&self, idx: LogicalCore) -> Result<crate::device::PhysicalCores> {
        let call = self.enter()?;
        let v = self.vtpb_get_virtual_core(&call, idx)?;
        let mut cores = [crate::device::PhysicalCore::default(); 2];
        let mut n = 0;
        for (slot, p) in cores.iter_mut().zip(v.cores()) {
            *slot = crate::device::PhysicalCore::new(p.device_id, p.device_tpb_idx);
            n += 1;
        }
        Ok(crate::device::PhysicalCores::from_slice(&cores[..n]))
    }

    /// `vtpb_get_virtual_core(idx)`: the owned logical core `idx`, bounds-checked (spec §9).
    /// The reference is only good while the gate token `call` is borrowed.
    pub(crate) fn vtpb_get_virtual_core<'g>(
        &'g self,
        call: &'g impl InCall,
        idx: LogicalCore,
    ) -> Result<&'g virtual_core_t> {
        let vc = self.vcores(call);
        let owned = vc.num_owned;
        let vnc = idx.to_c();
        usize::try_from(vnc)
            .ok()
            .filter(|_| vnc < owned as i64)
            .and_then(|i| vc.owned.get(i))
            .ok_or(Error::LogicalCoreOutOfRange { vnc, owned })
    }

    /// `vtpb_get_default_hbm_idx`: the HBM channel a logical core's tensors go to.
    #[doc(alias = "vtpb_get_default_hbm_idx")]
    pub fn logical_core_hbm(&self, idx: LogicalCore) -> Result<u32> {
        let call = self.enter()?;
        let v = *self.vtpb_get_virtual_core(&call, idx)?;
        Ok(self.vcore_default_hbm(&call, &v))
    }

    /// The HBM channel that serves logical core `v`: its owner core's (public ABI §3
    /// "HBM ↔ core").
    pub(crate) fn vcore_default_hbm(&self, call: &impl InCall, v: &virtual_core_t) -> u32 {
        let owner = v.tpbs[0];
        self.dev_geom(call, owner.device_id)
            .default_hbm(owner.device_tpb_idx)
    }

    /// The physical cores of logical core `idx` (a step of the gated call `call`).
    pub(crate) fn vcore_tpbs<'g>(
        &'g self,
        call: &'g impl InCall,
        idx: LogicalCore,
    ) -> Result<&'g [physical_core_t]> {
        self.vtpb_get_virtual_core(call, idx)
            .map(virtual_core_t::cores)
    }
}

impl virtual_core_t {
    /// Its physical cores (`tpbs[..num_tpbs]`).
    pub fn cores(&self) -> &[physical_core_t] {
        &self.tpbs[..self.num_tpbs.min(MAX_LNC_SIZE) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use al_hal_tpb_arch_type_t::*;

    #[test]
    fn vnc_rules() {
        assert_eq!(
            parse_vnc_config(AL_HAL_TPB_ARCH_TYPE_SUNDA, 2, Some(2)),
            Ok(1)
        );
        assert_eq!(
            parse_vnc_config(AL_HAL_TPB_ARCH_TYPE_CAYMAN, 8, None),
            Ok(2)
        );
        assert_eq!(
            parse_vnc_config(AL_HAL_TPB_ARCH_TYPE_CAYMAN, 8, Some(1)),
            Ok(1)
        );
        // Each refusal names the rule libnrt checks first (spec §9): the two assertions, then
        // the power-of-two cap, then the instance rule.
        let rule = |arch, cores, size| match parse_vnc_config(arch, cores, Some(size)) {
            Err(Error::VncConfig { rule, size: s }) if s == size => Some(rule),
            _ => None,
        };
        assert_eq!(rule(AL_HAL_TPB_ARCH_TYPE_CAYMAN, 8, 0), Some(VncRule::Zero));
        assert_eq!(
            rule(AL_HAL_TPB_ARCH_TYPE_CAYMAN, 8, 3),
            Some(VncRule::Divide { cores: 8 }),
            "the modulo assertion comes before the power-of-two gate"
        );
        assert_eq!(
            rule(AL_HAL_TPB_ARCH_TYPE_CAYMAN, 8, 4),
            Some(VncRule::PowerOfTwo { max: 2 })
        );
        assert!(parse_vnc_config(AL_HAL_TPB_ARCH_TYPE_CAYMAN, 6, Some(2)).is_ok());
        assert_eq!(
            rule(AL_HAL_TPB_ARCH_TYPE_CAYMAN, 3, 2),
            Some(VncRule::Divide { cores: 3 })
        );
        assert_eq!(
            rule(AL_HAL_TPB_ARCH_TYPE_MARIANA, 8, 1),
            Some(VncRule::OnlyTwo)
        );
        extern crate std;
        use std::string::ToString;
        assert_eq!(
            Error::VncConfig {
                rule: VncRule::PowerOfTwo { max: 2 },
                size: 4
            }
            .to_string(),
            "Logical core size (4) must be a power of two and less than or equal to 2"
        );
        assert_eq!(
            Error::VncConfig {
                rule: VncRule::OnlyTwo,
                size: 1
            }
            .to_string(),
            "Only LNC Size of 2 is supported at this moment on this instance type. Requested LNC Size 1"
        );
        assert_eq!(
            parse_vnc_config(AL_HAL_TPB_ARCH_TYPE_MARIANA, 8, None),
            Ok(2)
        );
    }
}
