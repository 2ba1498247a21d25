//! The state block's data, one file per domain: the structs [`super::CoreState`] embeds (the
//! domains' pools and tables, sized and bound here) and the entries their arenas hold. A
//! domain's steps over its data (`impl Nrt` blocks, views) live in the domain's module, which
//! re-exports the public types from here; this layer imports no domain.

pub(crate) mod dmem;
pub(crate) mod ledger;
pub(crate) mod model;
pub(crate) mod oom;
pub(crate) mod tensor;
pub(crate) mod vcore;
