//! Tensor sets (spec §7.3, `nrt_tensor_set_t`): the lookups over a set's entries and the
//! `set_*` API (the set arena's slots and entries are declared in `ctx/state/tensor.rs`).

use super::TENSOR_NAME_MAX;
use crate::arena::Arena;
use crate::cstr::c_name;
use crate::ctx::state::tensor::{SetBody, SetChunk, SetSlot};
use crate::ctx::Nrt;
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{self, Dropped, HandleKind, SetHandle, TensorHandle};
use crate::sync::relax;

/// FNV-1a of a name: lookups compare it first, so binding a model's hundreds of tensors by
/// name compares few names byte by byte.
fn name_hash(name: &[u8]) -> u32 {
    name.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

impl SetBody {
    fn find(&self, chunks: &Arena<SetChunk>, name: &str) -> Option<usize> {
        let hash = name_hash(name.as_bytes());
        chunks
            .chain_iter(&self.entries)
            .position(|e| e.hash == hash && c_name(&e.name) == name)
    }

    pub(super) fn get(&self, chunks: &Arena<SetChunk>, name: &str) -> Option<TensorHandle> {
        let i = self.find(chunks, name)?;
        chunks.chain_get(&self.entries, i).map(|e| {
            let [a, b, c] = e.tensor;
            TensorHandle::from_parts(a, b, c)
        })
    }

    /// Gives the entries' chunks back (the set is being destroyed).
    pub(super) fn clear(&mut self, chunks: &Arena<SetChunk>) {
        chunks.chain_clear(&mut self.entries);
    }
}

impl<'a> Nrt<'a> {
    /// The body of [`crate::tensor::Sets::create`].
    pub(crate) fn set_create(&self) -> Result<SetHandle> {
        let _call = self.enter()?;
        // Generation and reference words left alone: resolvers of old handles may read them.
        let (p, index) = self.st.tensor.sets.alloc_handle("tensor set", true, 0)?;
        // A slot of the set arena, ours alone until published (zeroed but for the two words:
        // an empty body).
        let Some((gen, refs)) = self.st.tensor.sets.words_of(p.as_ptr()) else {
            // Cannot happen (`alloc_handle` hands out slots of the arena): give it back.
            let _ = self.st.tensor.sets.cancel(p.as_ptr());
            return Err(Error::forged(HandleKind::Set));
        };
        let generation = handle::publish(gen, refs);
        Ok(SetHandle(handle::Raw {
            index,
            generation,
            epoch: self.epoch(),
        }))
    }

    /// The body of [`crate::tensor::Sets::destroy`].
    pub(crate) fn set_destroy(&self, h: SetHandle) -> Result<()> {
        let _call = self.enter()?;
        let pin = self.set_pin(h)?;
        match pin.drop_owner() {
            Ok(last) => {
                self.set_finalize(last.as_ptr());
                Ok(())
            }
            // A set has one owner, so never Shared; NoOwner: a racing destroy took it.
            Err(Dropped::Shared) => Ok(()),
            Err(_) => Err(Error::stale(HandleKind::Set)),
        }
    }

    /// Retires a set whose owner is gone and whose pins drained, and gives its slot back.
    fn set_finalize(&self, p: *mut SetSlot) {
        // Nobody else can reach it (owner gone, drained).
        if let Some(mut body) = self.set_body_finalizing(p) {
            body.clear(&self.st.tensor.set_chunks);
        }
        if let Some((gen, _)) = self.st.tensor.sets.words_of(p) {
            handle::retire(gen);
        }
        let _ = self.st.tensor.sets.release(p);
    }

    /// Teardown: frees every set still alive (after the gate drained: nobody pins one).
    pub(crate) fn free_all_sets(&self) {
        self.st.tensor.sets.drain_live(|p| {
            let p = p.as_ptr();
            if let Some((_, refs)) = self.st.tensor.sets.words_of(p) {
                if handle::drop_owner(refs) == Dropped::Last {
                    handle::wait_drained(refs, 0, relax);
                }
            }
            self.set_finalize(p);
        });
    }

    /// The body of [`crate::tensor::Sets::add`].
    pub(crate) fn set_add(&self, h: SetHandle, name: &str, t: TensorHandle) -> Result<()> {
        let _call = self.enter()?;
        if name.len() > TENSOR_NAME_MAX {
            return Err(Error::InvalidArgument(InvalidArg::TensorNameTooLong));
        }
        drop(self.tensor_pin(t)?);
        let pin = self.set_pin(h)?;
        let mut body = pin.body();
        let chunks = &self.st.tensor.set_chunks;
        let (a, b, c) = t.to_parts();
        let e = match body.find(chunks, name) {
            Some(i) => chunks.chain_get_mut(&mut body.entries, i),
            None => {
                let e = chunks.chain_push(&mut body.entries, 0, "tensor set chunk")?;
                e.hash = name_hash(name.as_bytes());
                e.name[..name.len()].copy_from_slice(name.as_bytes());
                Some(e)
            }
        };
        if let Some(e) = e {
            e.tensor = [a, b, c];
        }
        Ok(())
    }

    /// The body of [`crate::tensor::Sets::get`].
    pub(crate) fn set_get(&self, h: SetHandle, name: &str) -> Result<Option<TensorHandle>> {
        let _call = self.enter()?;
        let pin = self.set_pin(h)?;
        let found = pin.body().get(&self.st.tensor.set_chunks, name);
        Ok(found)
    }

    /// The body of [`crate::tensor::Sets::len`].
    pub(crate) fn set_len(&self, h: SetHandle) -> Result<usize> {
        let _call = self.enter()?;
        let pin = self.set_pin(h)?;
        let len = pin.body().entries.len();
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::name_hash;

    #[test]
    fn name_hash_is_fnv1a() {
        assert_eq!(name_hash(b""), 0x811c_9dc5);
        assert_eq!(name_hash(b"a"), 0xe40c_292c);
        assert_ne!(name_hash(b"input0"), name_hash(b"input1"));
    }
}
