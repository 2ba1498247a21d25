//! Tensor sets (spec §7.3, `nrt_tensor_set_t`): the set arena's slots, their entries and
//! the `set_*` API.

use super::TENSOR_NAME_MAX;
use crate::cstr::c_name;
use crate::ctx::Nrt;
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{self, Dropped, HandleKind, SetHandle, TensorHandle};
use crate::sync::relax;

/// Tensors one tensor set holds (spec §7.3: what one execution binds).
pub const SET_MAX: usize = 64;

/// One tensor set (`nrt_tensor_set_t`, spec §7.3; libnrt's `kbl_feature_map_set_t`): a slot
/// of the core's set arena (`CoreState::sets`, sized by [`crate::Capacity::sets`]), named by
/// a [`SetHandle`] through the pin protocol of [`crate::handle`]. Valid when all-zero.
#[repr(C)]
pub struct SetSlot {
    /// The slot's generation (only through `Arena::words`, atomically).
    pub(crate) generation: u32,
    _pad: u32,
    /// Owners (1 while the set lives) and pins.
    pub(crate) refs: core::sync::atomic::AtomicU64,
    /// The entries, behind the lock that guards them (`SetPin::body`, the one way to them):
    /// taken by `set_add`, `set_get`, `set_len` and an execution's binding, only while the set
    /// is pinned.
    pub(crate) body: crate::sync::DataLock<SetBody>,
}

const _: () = assert!(core::mem::offset_of!(SetSlot, generation) == 0);
const _: () = assert!(core::mem::offset_of!(SetSlot, refs) == 8);

// `SetSlot` is valid all-zero: its `ZeroValid` impl sits with the set slot's accessors
// (`ctx/tensor_access.rs`).

/// A set's entries: `len` (name, tensor handle words) pairs in insertion order.
#[repr(C)]
pub(crate) struct SetBody {
    len: u32,
    _pad: u32,
    tensors: [[u32; 3]; SET_MAX],
    names: [[u8; TENSOR_NAME_MAX + 1]; SET_MAX],
}

impl SetBody {
    fn find(&self, name: &str) -> Option<usize> {
        (0..(self.len as usize).min(SET_MAX)).find(|&i| c_name(&self.names[i]) == name)
    }

    pub(super) fn get(&self, name: &str) -> Option<TensorHandle> {
        self.find(name).map(|i| {
            let [a, b, c] = self.tensors[i];
            TensorHandle::from_parts(a, b, c)
        })
    }
}

impl<'a> Nrt<'a> {
    /// `nrt_allocate_tensor_set`: an empty tensor set of this runtime. A full set arena is
    /// [`Error::ArenaFull`] naming the setting that raises it (`Capacity.sets`,
    /// `NRT_DMEM_MAX_SETS`).
    pub fn set_create(&self) -> Result<SetHandle> {
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

    /// `nrt_destroy_tensor_set`: frees the set (not its tensors), once any call using it on
    /// another thread is done. A stale (already destroyed, at any age), forged or foreign
    /// handle is [`Error::InvalidHandle`] and nothing changes. `Closed` / `Uninitialized`
    /// outside an initialised runtime: `close` frees every set (spec §12), so a set of a
    /// closed runtime is already gone.
    pub fn set_destroy(&self, h: SetHandle) -> Result<()> {
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

    /// `nrt_add_tensor_to_tensor_set`: adds tensor `t` under `name` (at most 95 bytes), replacing
    /// a tensor of the same name. `t` must be a live tensor of this runtime now
    /// ([`Error::InvalidHandle`] otherwise); one freed later makes an execution that binds it
    /// fail with [`Error::InvalidHandle`]. A set holds [`SET_MAX`] tensors
    /// ([`Error::SetFull`], NRT_RESOURCE, beyond). A failed add changes nothing.
    pub fn set_add(&self, h: SetHandle, name: &str, t: TensorHandle) -> Result<()> {
        let _call = self.enter()?;
        if name.len() > TENSOR_NAME_MAX {
            return Err(Error::InvalidArgument(InvalidArg::TensorNameTooLong));
        }
        drop(self.tensor_pin(t)?);
        let pin = self.set_pin(h)?;
        let mut body = pin.body();
        let (a, b, c) = t.to_parts();
        let i = match body.find(name) {
            Some(i) => i,
            None if body.len as usize >= SET_MAX => return Err(Error::SetFull),
            None => {
                let i = body.len as usize;
                body.names[i] = [0; TENSOR_NAME_MAX + 1];
                body.names[i][..name.len()].copy_from_slice(name.as_bytes());
                body.len += 1;
                i
            }
        };
        body.tensors[i] = [a, b, c];
        Ok(())
    }

    /// `nrt_get_tensor_from_tensor_set`: the tensor stored under `name` (`None` when the set
    /// has none). The handle is returned as stored: a tensor freed since is refused where
    /// it is used.
    pub fn set_get(&self, h: SetHandle, name: &str) -> Result<Option<TensorHandle>> {
        let _call = self.enter()?;
        let pin = self.set_pin(h)?;
        let found = pin.body().get(name);
        Ok(found)
    }

    /// Tensors in set `h`.
    pub fn set_len(&self, h: SetHandle) -> Result<usize> {
        let _call = self.enter()?;
        let pin = self.set_pin(h)?;
        let len = pin.body().len as usize;
        Ok(len)
    }
}
