//! The execute data path (spec §7.1, §7.3): binding a model's declared tensors from two
//! tensor sets, the striped execute data lock, the bound tensors' pins and their
//! pending-exec marks.

use core::sync::atomic::Ordering;

use super::access::BoundTensors;
use crate::ctx::{InFlight, Nrt};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{ModelHandle, SetHandle};
use crate::model::ExecGuard;

use crate::ctx::state::tensor::EXEC_DATA_STRIPES;

impl<'a> Nrt<'a> {
    /// The body of [`crate::tensor::Tensors::execute`].
    pub(crate) fn execute(
        &self,
        h: ModelHandle,
        inputs: SetHandle,
        outputs: SetHandle,
    ) -> Result<()> {
        let call = self.enter()?;
        let g = self.exec_begin(h)?;
        // Every bound tensor stays pinned for the whole execution: a racing free waits.
        let mut bound = BoundTensors::new(self);
        let ni = self.bind(&call, &g, false, inputs, &mut bound)?;
        let no = self.bind(&call, &g, true, outputs, &mut bound)?;
        let at = |b: &BoundTensors<'_>, i: usize| {
            b.get(i)
                .ok_or(Error::InvalidArgument(InvalidArg::TooManyBound))
        };
        // Every copy is checked before any output is written, so a refused execution leaves
        // its outputs as they were.
        for k in 0..no.min(ni) {
            let (i, o) = (at(&bound, k)?, at(&bound, ni + k)?);
            // Bound: pinned by `bound` (`held_tensor`'s contract).
            let n = self.held_tensor(i)?.size().min(self.held_tensor(o)?.size());
            self.copy_check(i, 0, o, 0, n)?;
        }
        // Unmarked when `bound` drops, also if a copy below panics (a count left up would make
        // every later read of the output wait forever, see `when_written`).
        bound.mark(self, ni)?;
        let tensor = |i: usize| at(&bound, i);
        // Executions that share a storage move their data one at a time (spec §7.1: a tensor
        // is not read while the execution writing it runs; executions on different cores may
        // share tensors); executions with disjoint tensors run side by side.
        let mut stripes = 0u64;
        for k in 0..ni + no {
            stripes |= 1 << self.exec_stripe(tensor(k)?)?;
        }
        let data = ExecDataGuard::lock(self.st, stripes);
        let mut r = Ok(());
        for k in 0..no {
            let o = tensor(ni + k)?;
            // Bound: pinned by `bound` (`held_tensor`'s contract).
            let olen = self.held_tensor(o)?.size();
            let copied = if k < ni {
                let i = tensor(k)?;
                let n = self.held_tensor(i)?.size().min(olen);
                self.tensor_copy_bytes(&call, i, 0, o, 0, n).map(|_| n)
            } else {
                Ok(0)
            };
            r = copied.and_then(|n| {
                if n < olen {
                    self.tensor_fill(&call, o, n, 0, olen - n)
                } else {
                    Ok(())
                }
            });
            if r.is_err() {
                break;
            }
        }
        drop(data);
        if r.is_ok() {
            for k in 0..no {
                // Bound: pinned by `bound` (`held_tensor`'s contract), checked live by `bind`.
                if let Ok(t) = tensor(ni + k).and_then(|o| self.held_tensor(o)) {
                    t.completions().fetch_add(1, Ordering::AcqRel);
                }
            }
        }
        // Marks off and pins ended before the model's hold.
        drop(bound);
        drop(g);
        r
    }

    /// Binds the model's declared inputs (or outputs) to the tensors of set `set` by name,
    /// pinning each for the execution (appended to `bound`). The set is read under its lock
    /// (a racing `set_add` waits) and stays pinned only for the binding: the tensors, not the
    /// set, are what the execution uses.
    fn bind(
        &self,
        call: &InFlight<'_>,
        g: &ExecGuard<'_>,
        output: bool,
        set: SetHandle,
        bound: &mut BoundTensors<'a>,
    ) -> Result<usize> {
        let sp = self.set_pin(set)?;
        let body = sp.body();
        let chunks = &self.st.tensor.set_chunks;
        let shard = g.shard();
        let mut r = Ok(0);
        g.for_each_io(call, output, |io| {
            let Ok(n) = r else {
                return;
            };
            r = (|| {
                let h = body
                    .get(chunks, io.name)
                    .ok_or(Error::InvalidArgument(if output {
                        InvalidArg::OutputMissing
                    } else {
                        InvalidArg::InputMissing
                    }))?;
                let t = bound.push(self.tensor_pin(h)?, shard)?;
                // Pinned by `bound` (`held_tensor`'s contract).
                let (_, _, len) = self.storage_of(self.held_tensor(t)?)?;
                if len != io.size {
                    return Err(Error::InvalidArgument(InvalidArg::TensorSizeMismatch));
                }
                Ok(n + 1)
            })();
        })?;
        r
    }
}

impl Nrt<'_> {
    /// The execute data lock stripe of bound tensor `t`: its storage's arena slot, modulo the
    /// stripes, so every tensor viewing one storage (slices included) has the same stripe.
    fn exec_stripe(&self, t: super::Tensor) -> Result<usize> {
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
