//! The execute data path (spec §7.1, §7.3): binding a model's declared tensors from two
//! tensor sets, the striped execute data lock, the bound tensors' pins and their
//! pending-exec marks.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::{Tensor, TensorPin};
use crate::ctx::{Nrt, StorageRef};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{ModelHandle, SetHandle};
use crate::model::ExecGuard;

impl<'a> Nrt<'a> {
    /// The execute data path behind `nrt_execute`: binds `inputs`/`outputs` (each `(name,
    /// tensor)`) to the model's declared tensors by name — a missing or wrongly sized one is
    /// NRT_INVALID — then, inside the exec seam, copies each input's bytes to the output of the
    /// same position (zero-filling the rest) and bumps each output's completion count.
    ///
    /// The sets are tensor sets of this runtime ([`Nrt::set_create`]); a stale, forged or
    /// foreign model or set handle is [`Error::InvalidHandle`], and nothing is written.
    pub fn execute(&self, h: ModelHandle, inputs: SetHandle, outputs: SetHandle) -> Result<()> {
        let call = self.enter()?;
        let g = self.exec_begin(h)?;
        let mut ins: [Tensor; 32] = [null_mut(); 32];
        let mut outs: [Tensor; 32] = [null_mut(); 32];
        // Every bound tensor stays pinned for the whole execution: a racing free waits.
        let mut pins = PinList::new();
        let ni = self.bind(&g, false, inputs, &mut ins, &mut pins)?;
        let no = self.bind(&g, true, outputs, &mut outs, &mut pins)?;
        // Unmarked when dropped, also if a copy below panics (a count left up would make
        // every later read of the output wait forever, see `when_written`).
        // Every copy is checked before any output is written, so a refused execution leaves
        // its outputs as they were.
        for (k, o) in outs[..no.min(ni)].iter().enumerate() {
            // Bound: pinned by `pins` (`held_tensor`'s contract).
            let n = self
                .held_tensor(ins[k])?
                .size()
                .min(self.held_tensor(*o)?.size());
            self.copy_check(ins[k], 0, *o, 0, n)?;
        }
        let marks = PendingMarks::new(self, &ins[..ni], &outs[..no])?;
        // Executions that share a storage move their data one at a time (spec §7.1: a tensor
        // is not read while the execution writing it runs; executions on different cores may
        // share tensors); executions with disjoint tensors run side by side.
        let mut stripes = 0u64;
        for t in ins[..ni].iter().chain(&outs[..no]) {
            stripes |= 1 << self.exec_stripe(*t)?;
        }
        let data = ExecDataGuard::lock(self.st, stripes);
        let mut r = Ok(());
        for (k, o) in outs[..no].iter().enumerate() {
            // Bound: pinned by `pins` (`held_tensor`'s contract).
            let olen = self.held_tensor(*o)?.size();
            let copied = if k < ni {
                let n = self.held_tensor(ins[k])?.size().min(olen);
                self.tensor_copy_bytes(&call, ins[k], 0, *o, 0, n)
                    .map(|_| n)
            } else {
                Ok(0)
            };
            r = copied.and_then(|n| {
                if n < olen {
                    self.tensor_fill(&call, *o, n, 0, olen - n)
                } else {
                    Ok(())
                }
            });
            if r.is_err() {
                break;
            }
        }
        drop(data);
        drop(marks);
        if r.is_ok() {
            for o in &outs[..no] {
                // Bound: pinned by `pins` (`held_tensor`'s contract), checked live by `bind`.
                if let Ok(t) = self.held_tensor(*o) {
                    t.completions().fetch_add(1, Ordering::AcqRel);
                }
            }
        }
        drop(g);
        r
    }

    /// Binds the model's declared inputs (or outputs) to the tensors of set `set` by name,
    /// pinning each for the execution. The set is read under its lock (a racing `set_add`
    /// waits) and stays pinned only for the binding: the tensors, not the set, are what the
    /// execution uses.
    fn bind(
        &self,
        g: &ExecGuard<'_>,
        output: bool,
        set: SetHandle,
        out: &mut [Tensor; 32],
        pins: &mut PinList<'a>,
    ) -> Result<usize> {
        let sp = self.set_pin(set)?;
        let body = sp.body();
        let mut i = 0;
        while let Some(io) = self.model_io(g, output, i) {
            let h = body.get(io.name).ok_or(Error::InvalidArgument(if output {
                InvalidArg::OutputMissing
            } else {
                InvalidArg::InputMissing
            }))?;
            let t = pins.push(self.tensor_pin(h)?)?;
            // Pinned by `pins` (`held_tensor`'s contract).
            let (_, _, len) = self.storage_of(self.held_tensor(t)?)?;
            if len != io.size {
                return Err(Error::InvalidArgument(InvalidArg::TensorSizeMismatch));
            }
            out[i] = t;
            i += 1;
        }
        Ok(i)
    }
}

/// Stripes of the execute data lock (`CoreState::exec_data_locks`): one bit each of a `u64`.
pub(crate) const EXEC_DATA_STRIPES: usize = 64;

impl Nrt<'_> {
    /// The execute data lock stripe of bound tensor `t`: its storage's arena slot, modulo the
    /// stripes, so every tensor viewing one storage (slices included) has the same stripe.
    fn exec_stripe(&self, t: Tensor) -> Result<usize> {
        // Bound: pinned by the execution (`held_tensor`'s contract).
        let (s, _, _) = self.storage_of(self.held_tensor(t)?)?;
        Ok(self.st.tensor.storages.index_of(s.as_ptr()).unwrap_or(0) % EXEC_DATA_STRIPES)
    }
}

/// The stripes of the execute data lock one execution holds, taken in ascending order (so
/// two executions never wait for each other's stripes in a cycle), released on drop.
pub(crate) struct ExecDataGuard<'a> {
    _held: heapless::Vec<crate::sync::MutexGuard<'a>, EXEC_DATA_STRIPES>,
}

impl<'a> ExecDataGuard<'a> {
    /// Locks every stripe whose bit is set in `stripes`, lowest first.
    pub(crate) fn lock(st: &'a crate::ctx::CoreState, mut stripes: u64) -> Self {
        let mut held = heapless::Vec::new();
        while stripes != 0 {
            let i = stripes.trailing_zeros() as usize;
            stripes &= stripes - 1;
            // At most EXEC_DATA_STRIPES bits, so the push never finds the list full.
            let _ = held.push(st.tensor.exec_data_locks[i].0.lock());
        }
        ExecDataGuard { _held: held }
    }
}

/// The pins an execution holds on its bound tensors (up to 32 inputs + 32 outputs).
pub(crate) struct PinList<'a> {
    pins: heapless::Vec<TensorPin<'a>, 64>,
}

impl<'a> PinList<'a> {
    fn new() -> Self {
        PinList {
            pins: heapless::Vec::new(),
        }
    }
    /// Keeps `p` until the list drops; its tensor.
    fn push(&mut self, p: TensorPin<'a>) -> Result<Tensor> {
        let t = p.as_ptr();
        self.pins
            .push(p)
            .map_err(|_| Error::InvalidArgument(InvalidArg::TooManyBound))?;
        Ok(t)
    }
}

/// An execution's marks on its bound tensors' storages (spec §7.1 `pending_exec_count_read`
/// and `_write`): counted up when made, down when dropped. Outputs are marked under the
/// storage's `tensor_op_cv_lock`, which [`Nrt::when_written`]'s readers hold.
struct PendingMarks<'p> {
    ins: heapless::Vec<StorageRef<'p>, 32>,
    outs: heapless::Vec<StorageRef<'p>, 32>,
}

impl<'p> PendingMarks<'p> {
    /// Marks the storages of `ins` and `outs`, bound tensors the execution holds pinned
    /// (`held_tensor`'s contract) for as long as the marks live.
    fn new(n: &'p Nrt<'_>, ins: &[Tensor], outs: &[Tensor]) -> Result<Self> {
        let mut m = PendingMarks {
            ins: heapless::Vec::new(),
            outs: heapless::Vec::new(),
        };
        for (list, ts) in [(&mut m.ins, ins), (&mut m.outs, outs)] {
            for t in ts {
                let (s, _, _) = n.storage_of(n.held_tensor(*t)?)?;
                list.push(s)
                    .map_err(|_| Error::InvalidArgument(InvalidArg::TooManyBound))?;
            }
        }
        for s in &m.ins {
            s.pending_reads().fetch_add(1, Ordering::AcqRel);
        }
        for s in &m.outs {
            let _g = s.op_lock().lock();
            s.pending_writes().fetch_add(1, Ordering::AcqRel);
        }
        Ok(m)
    }
}

impl Drop for PendingMarks<'_> {
    fn drop(&mut self) {
        for s in &self.ins {
            s.pending_reads().fetch_sub(1, Ordering::AcqRel);
        }
        for s in &self.outs {
            s.pending_writes().fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::sync::atomic::AtomicBool;

    /// spec §7.1 through the striped execute data lock: an execution whose stripes meet
    /// another's (a shared storage) waits for it; one with disjoint stripes does not.
    #[test]
    fn executions_sharing_a_stripe_serialise_and_disjoint_ones_do_not() {
        let state = crate::ctx::CoreState::new_boxed();
        let st = &*state;
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let first = ExecDataGuard::lock(st, 1 << 3 | 1 << 5);
            // Disjoint stripes: taken at once, while the first execution holds its own.
            drop(ExecDataGuard::lock(st, 1 << 4 | 1 << 63));
            let waiter = s.spawn(|| {
                let _g = ExecDataGuard::lock(st, 1 << 5 | 1 << 9);
                done.load(Ordering::Acquire)
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            done.store(true, Ordering::Release);
            drop(first);
            assert!(
                waiter.join().unwrap(),
                "an execution sharing stripe 5 ran while the first one held it"
            );
        });
    }
}
