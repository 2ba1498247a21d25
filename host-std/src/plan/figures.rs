//! The plan's figures: per logical core, per HBM (the blocks of each model) and the first
//! device OOM's missing bytes.

use super::*;

/// Logical core `v` after placement; its headroom capped by the free bytes of the channels
/// in `hbm` it draws from ([`CorePlan::headroom`]).
pub(super) fn core_plan(nrt: &Nrt<'_>, v: i64, hbm: &[HbmPlan]) -> CorePlan {
    let st = nrt
        .ledger()
        .memory_stats(LogicalCore::from_c(v))
        .unwrap_or_default();
    let pcores = nrt
        .logical_core_entry(LogicalCore::from_c(v))
        .map(|c| c.cores().to_vec())
        .unwrap_or_default();
    let physical = pcores
        .iter()
        .map(|p| format!("nd{}:nc{}", p.device_id, p.device_tpb_idx))
        .collect();
    // The channels it draws from, each once, as `bytes_limit` counts them.
    let mut channels: Vec<(u32, u32)> = pcores
        .iter()
        .map(|p| {
            (
                p.device_id,
                nrt.geom(p.device_id).default_hbm(p.device_tpb_idx),
            )
        })
        .collect();
    channels.sort_unstable();
    channels.dedup();
    let channel_free: u64 = hbm
        .iter()
        .filter(|h| channels.contains(&(h.device, h.hbm)))
        .map(|h| h.free)
        .sum();
    CorePlan {
        index: v,
        physical,
        models: nrt
            .models()
            .on_core(LogicalCore::from_c(v), &mut [])
            .unwrap_or(0),
        used: st.bytes_used,
        limit: st.bytes_limit,
        headroom: st
            .bytes_limit
            .saturating_sub(st.bytes_used)
            .min(channel_free),
        usage: usage_list(
            &nrt.ledger()
                .logical_core_usage(LogicalCore::from_c(v))
                .unwrap_or_default()
                .device,
        ),
    }
}

/// Every HBM channel: pool figures from the driver, the ledger's bytes, and the live
/// allocations (the GLOBAL heaps of every physical core, the models' MODEL heaps) placed by
/// the simulated driver's own addresses, each with the model of `owned` it belongs to; on a
/// shared device also what other processes hold (`resident`, live in the scratch device's
/// pools), in `used`, `usage` and `blocks`.
pub(super) fn hbm_plan(
    rt: &HostRuntime,
    owned: &[Owned],
    resident: &[crate::shared::Resident],
) -> Vec<HbmPlan> {
    let nrt = rt.nrt();
    // The HBM block of driver handle `handle` on `device`, with its usage and owner: its
    // channel and offset in it from the simulated driver's own addresses (none for host
    // memory or a handle the driver does not know).
    let block =
        |device: u32, handle: u64, usage: String, model: Option<usize>, owner_pid: Option<u32>| {
            let info = rt.sim()?.memory_info(device, handle).ok()?;
            if info.host {
                return None;
            }
            let base = u64::from(info.hbm_idx) * nrt.geom(device).channel_size;
            Some((
                device,
                info.hbm_idx,
                Block {
                    offset: info.pa.saturating_sub(base),
                    model,
                    size: info.size,
                    usage,
                    small_object: info.small_pool,
                    owner_pid,
                },
            ))
        };
    let mut seen = std::collections::HashSet::new();
    let mut blocks: Vec<(u32, u32, Block)> = Vec::new();
    let mut add = |d: &nrt_core::dmem::DmemInfo, model: Option<usize>| {
        if d.mem_type != dma_mem_location_t::TONGA_DRAM as u32
            || !seen.insert((d.device_id, d.mem_handle))
        {
            return;
        }
        let usage = usage_name(d.mem_usage_type);
        blocks.extend(block(d.device_id, d.mem_handle, usage, model, None));
    };
    // The models' own heaps first: a block is listed once, with its model.
    for o in owned {
        let _ = nrt
            .models()
            .for_each_dmem(o.handle, |_, e| add(&e.info, Some(o.model)));
    }
    for dev in 0..nrt.num_devices() {
        for c in 0..nrt.geom(dev).cores {
            if let Ok(al) = nrt
                .dmem()
                .core_allocator(nrt_core::PhysicalCore::new(dev, c))
            {
                let _ = nrt.dmem().allocator_for_each(al, |e| add(&e.info, None));
            }
        }
    }
    // The IO tensors the plan allocated live in the GLOBAL heaps: each block holding one of
    // a model's tensors is that model's.
    for o in owned {
        let Some(dev) = nrt
            .logical_core_entry(LogicalCore::from_c(o.core))
            .ok()
            .and_then(|v| v.cores().first().map(|p| p.device_id))
        else {
            continue;
        };
        for t in &o.tensors {
            let Ok(i) = nrt.tensors().device_allocation_info(*t) else {
                continue;
            };
            let Ok(hbm) = u32::try_from(i.hbm_index) else {
                continue;
            };
            let at = i
                .physical_address
                .saturating_sub(u64::from(hbm) * nrt.geom(dev).channel_size);
            if let Some((_, _, b)) = blocks.iter_mut().find(|(d, h, b)| {
                *d == dev && *h == hbm && b.offset <= at && at < b.offset.saturating_add(b.size)
            }) {
                b.model = Some(o.model);
            }
        }
    }
    // Other processes' allocations: in the pools the plan ran on, not in its ledger.
    let mut others = std::collections::HashMap::<(u32, u32), u64>::new();
    for r in resident {
        let usage = format!(
            "other processes: {}",
            crate::shared::layout::category_name(usize::from(r.category))
        );
        if let Some(b) = block(r.device, r.handle, usage, None, Some(r.pid)) {
            *others.entry((b.0, b.1)).or_default() += b.2.size;
            blocks.push(b);
        }
    }
    blocks.sort_by_key(|(d, h, b)| (*d, *h, b.offset));
    let drv = rt.driver();
    let mut out = Vec::new();
    for dev in 0..nrt.num_devices() {
        let g = nrt.geom(dev);
        let ledger = nrt.ledger().hbm(dev);
        for h in 0..g.channels {
            let p = drv
                .pool_stats(dev, false, h)
                .unwrap_or(PoolStats::one_region(0, 0, 0, 0));
            let mine: Vec<Block> = blocks
                .iter()
                .filter(|(d, c, _)| *d == dev && *c == h)
                .map(|(_, _, b)| b.clone())
                .collect();
            let mut by: Vec<(String, u64)> = Vec::new();
            for b in &mine {
                match by.iter_mut().find(|(n, _)| *n == b.usage) {
                    Some((_, v)) => *v += b.size,
                    None => by.push((b.usage.clone(), b.size)),
                }
            }
            by.sort();
            out.push(HbmPlan {
                device: dev,
                hbm: h,
                channel_size: g.channel_size,
                capacity: p.capacity,
                used: ledger.get(h as usize).copied().unwrap_or(0)
                    + others.get(&(dev, h)).copied().unwrap_or(0),
                free: p.free,
                largest_free: p.largest_free,
                small_object_free: p.small_object_free,
                small_object_largest_free: p.small_object_largest_free,
                usage: by,
                blocks: mine,
            });
        }
    }
    out
}

/// The first device OOM's figures, all in the failing request's own terms (what the user
/// asked for, as [`OomCause`] states it): `requested` its page-rounded size, `largest_block`
/// the largest request of the same alignment that would have succeeded (with emulated
/// alignment, the driver's block less the alignment the emulation adds, as
/// `FailedRequest::in_request_terms` measures it), `missing` the difference. Only
/// `larger_than_channel` is the driver's view: whether what the driver must be asked for
/// (`size + align` when emulated) exceeds `most`, the largest request the channel takes when
/// empty (its main pool's extent after the firmware carve-out; the small-object region is
/// smaller).
pub(super) fn oom_figures(
    e: &nrt_core::Error,
    ch: Option<&FailingChannel>,
    most: u64,
) -> Option<OomFigures> {
    let nrt_core::Error::DeviceOom {
        size,
        device,
        hbm,
        usage,
        ..
    } = *e
    else {
        return None;
    };
    let (requested, emulation, largest, free, why) = match ch {
        Some(c) => {
            let (needed, emulation) = match c.cause {
                OomCause::ChannelFull {
                    needed, emulation, ..
                } => (needed, emulation),
                OomCause::NoBlock { needed, .. }
                | OomCause::Alignment { needed, .. }
                | OomCause::Refused { needed, .. } => (needed, 0),
            };
            (
                needed,
                emulation,
                c.shown.largest_request(),
                c.shown.free,
                c.cause.to_string(),
            )
        }
        None => (size, 0, 0, 0, String::new()),
    };
    Some(OomFigures {
        device,
        hbm,
        usage: usage.short_name().to_string(),
        requested,
        largest_block: largest,
        missing: requested.saturating_sub(largest),
        channel_free: free,
        larger_than_channel: requested.saturating_add(emulation) > most,
        why,
    })
}
