//! Memory categories an `expect.category` names (neuron-monitor classes, the DMA rings, a usage
//! type, the total) and the rows of the per-core reports.

use std::fmt;

use nrt_core::abi::tables::category_for;
use nrt_core::abi::{dma_mem_location_t, dma_mem_usage_type_t, mem_alloc_category_t};
use nrt_core::ledger::MonitorClass;

use nrt_host::manifest::parse_usage;

/// What an `expect.category` names: a neuron-monitor class, the DMA rings, one usage type, or
/// the total.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Category {
    /// A neuron-monitor class of a core ([`MonitorClass`]: through each usage type's device
    /// category; `runtime_memory` includes the DMA rings, as neuron-monitor's per-core report
    /// does).
    Class(MonitorClass),
    /// The driver's `dma_rings` counter (device category DMA_RINGS_DEVICE: usage types
    /// DMA_RING, DMA_RING_SPILL, DMA_RING_IO, DMA_RING_COLLECTIVES).
    DmaRings,
    /// One `dma_mem_usage_type_t`.
    Usage(dma_mem_usage_type_t),
    /// Every category.
    Total,
}

/// The per-core classes in report order, with neuron-monitor's names (device side), and the
/// DMA rings last: neuron-monitor folds them into `runtime_memory`; the text reports show them
/// again on their own row ([`REPORT_ROWS`]).
pub const DEVICE_CLASSES: [(&str, Category); 6] = [
    ("tensors", Category::Class(MonitorClass::Tensors)),
    ("constants", Category::Class(MonitorClass::Constants)),
    ("model_code", Category::Class(MonitorClass::ModelCode)),
    (
        "model_shared_scratchpad",
        Category::Class(MonitorClass::ModelSharedScratchpad),
    ),
    (
        "runtime_memory",
        Category::Class(MonitorClass::RuntimeMemory),
    ),
    ("dma_rings", Category::DmaRings),
];

/// The rows of a core's text report, with their labels: every class at its full value, as
/// `stats --json` and scenario expectations count it (`runtime_memory` includes the rings),
/// then the rings as a part of `runtime_memory`.
pub const REPORT_ROWS: [(&str, Category); 6] = [
    DEVICE_CLASSES[0],
    DEVICE_CLASSES[1],
    DEVICE_CLASSES[2],
    DEVICE_CLASSES[3],
    DEVICE_CLASSES[4],
    ("  of which dma_rings", Category::DmaRings),
];

impl Category {
    /// Parses a class name (`tensors`, `constants`, `model_code`, `model_shared_scratchpad`,
    /// `runtime_memory`, `dma_rings`/`dma_buffers`), `total`, or a usage type by name
    /// (`DMA_RING`, `DMA_MEM_USAGE_TYPE_WEIGHT`). A usage name this project used before it
    /// took libnrt's enum is refused with the name to use now, and so is a bare number.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        if t == "total" {
            return Ok(Category::Total);
        }
        if t == "dma_buffers" {
            return Ok(Category::DmaRings);
        }
        if let Some((_, c)) = DEVICE_CLASSES.iter().find(|(n, _)| *n == t) {
            return Ok(*c);
        }
        // Scenario files carry no format version, and the usage numbers changed when the
        // project took libnrt's enum (3 was CONSTANTS, now INSTR_POOL): a number is refused
        // rather than read with a meaning its author may not have meant.
        if let Ok(v) = t.parse::<u32>() {
            let now = dma_mem_usage_type_t::from_raw(v).map_or(String::new(), |u| {
                format!(" ({v} is {} now)", u.short_name())
            });
            return Err(format!(
                "a usage number is not accepted in a scenario: the numbers are libnrt 2.31's \
                 since the usage types were renumbered{now}; write the usage's name"
            ));
        }
        parse_usage(s).map(Category::Usage)
    }

    /// Device bytes of this category in a breakdown (`[usage]`, index 22 = total).
    pub fn of(self, device: &[u64; 23]) -> u64 {
        match self {
            Category::Total => device[22],
            Category::Usage(u) => device[u as usize],
            Category::Class(c) => c.of(device),
            Category::DmaRings => dma_mem_usage_type_t::all()
                .filter(|u| {
                    category_for(dma_mem_location_t::TONGA_DRAM, *u)
                        == mem_alloc_category_t::DMA_RINGS_DEVICE as u8
                })
                .map(|u| device[u as usize])
                .sum(),
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Category::Total => f.write_str("total"),
            Category::Usage(u) => f.write_str(u.short_name()),
            Category::Class(c) => f.write_str(c.name()),
            Category::DmaRings => f.write_str("dma_rings"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_parse() {
        assert_eq!(
            Category::parse("tensors"),
            Ok(Category::Class(MonitorClass::Tensors))
        );
        assert_eq!(
            Category::parse("DMA_RING"),
            Ok(Category::Usage(
                dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_DMA_RING
            ))
        );
        assert_eq!(
            Category::parse("dma_mem_usage_type_tensor"),
            Ok(Category::Usage(
                dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR
            ))
        );
        // Numbers changed meaning with the renumbering: refused, naming what the number is now.
        let e = Category::parse("3").unwrap_err();
        assert!(e.contains("3 is INSTR_POOL now"), "{e}");
        assert_eq!(Category::parse("total"), Ok(Category::Total));
        assert!(Category::parse("nonsense").is_err());
        // An old project name is refused with its replacement, never taken as an alias.
        let e = Category::parse("SHARED_SCRATCHPAD").unwrap_err();
        assert!(e.contains("use SCRATCHPAD"), "{e}");
    }
}
