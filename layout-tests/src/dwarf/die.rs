//! The DIE walk: the units of the debug info, the index of the wanted type names, and the
//! reading of a struct, union or enum (sizes, member offsets, array bounds, enumerators) with
//! its typedef / qualifier / array chains followed up to `MAX_DEPTH`.

use std::collections::HashMap;

use gimli::{AttributeValue, UnitOffset, UnitType};

use super::*;

pub(super) struct Ctx<'a> {
    dwarf: gimli::Dwarf<R<'a>>,
    pub(super) units: Vec<gimli::Unit<R<'a>>>,
    /// `.debug_info` offset where each unit starts (for `DW_FORM_ref_addr`), sorted.
    starts: Vec<(usize, usize)>,
    /// Type-unit signature → the type it defines (`DW_FORM_ref_sig8`).
    pub(super) signatures: HashMap<u64, TypeLoc>,
    pub(super) skeletons: usize,
    pub(super) first_dwo: Option<String>,
}

pub(super) struct Index {
    aggregates: HashMap<String, TypeLoc>,
    enums: HashMap<String, TypeLoc>,
    typedefs: HashMap<String, TypeLoc>,
}

impl Index {
    pub(super) fn aggregate(&self, ctx: &Ctx<'_>, name: &str) -> Option<TypeLoc> {
        if let Some(l) = self.aggregates.get(name) {
            return Some(*l);
        }
        let t = ctx.peel(*self.typedefs.get(name)?)?;
        let tag = ctx.entry(t)?.tag();
        matches!(
            tag,
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type
        )
        .then_some(t)
    }

    pub(super) fn enumeration(&self, ctx: &Ctx<'_>, name: &str) -> Option<TypeLoc> {
        if let Some(l) = self.enums.get(name) {
            return Some(*l);
        }
        let t = ctx.peel(*self.typedefs.get(name)?)?;
        (ctx.entry(t)?.tag() == gimli::DW_TAG_enumeration_type).then_some(t)
    }
}

impl<'a> Ctx<'a> {
    pub(super) fn new(dwarf: gimli::Dwarf<R<'a>>) -> gimli::Result<Ctx<'a>> {
        let mut ctx = Ctx {
            dwarf,
            units: Vec::new(),
            starts: Vec::new(),
            signatures: HashMap::new(),
            skeletons: 0,
            first_dwo: None,
        };
        let mut headers = Vec::new();
        let mut it = ctx.dwarf.units();
        while let Some(h) = it.next()? {
            headers.push(h);
        }
        let mut it = ctx.dwarf.type_units();
        while let Some(h) = it.next()? {
            headers.push(h);
        }
        for h in headers {
            let skeleton = matches!(h.type_(), UnitType::Skeleton(_));
            let unit = ctx.dwarf.unit(h)?;
            let dwo = if skeleton || unit.header.version() < 5 {
                unit.dwo_name()?
            } else {
                None
            };
            if let Some(dwo) = dwo {
                ctx.skeletons += 1;
                if ctx.first_dwo.is_none() {
                    ctx.first_dwo = ctx
                        .dwarf
                        .attr_string(&unit, dwo)
                        .ok()
                        .map(|s| s.to_string_lossy().into_owned());
                }
                continue;
            }
            let idx = ctx.units.len();
            if let Some(start) = unit.header.offset().as_debug_info_offset() {
                ctx.starts.push((start.0, idx));
            }
            if let UnitType::Type {
                type_signature,
                type_offset,
            } = unit.header.type_()
            {
                ctx.signatures.insert(
                    type_signature.0,
                    TypeLoc {
                        unit: idx,
                        offset: type_offset.0,
                    },
                );
            }
            ctx.units.push(unit);
        }
        ctx.starts.sort_unstable();
        Ok(ctx)
    }

    /// One pass over every DIE, remembering the first complete definition of each wanted name.
    pub(super) fn index(&self, wanted: &BTreeSet<&str>) -> gimli::Result<Index> {
        let mut ix = Index {
            aggregates: HashMap::new(),
            enums: HashMap::new(),
            typedefs: HashMap::new(),
        };
        for (u, unit) in self.units.iter().enumerate() {
            let mut cursor = unit.entries();
            while let Some((_, e)) = cursor.next_dfs()? {
                let map = match e.tag() {
                    gimli::DW_TAG_structure_type
                    | gimli::DW_TAG_union_type
                    | gimli::DW_TAG_class_type => &mut ix.aggregates,
                    gimli::DW_TAG_enumeration_type => &mut ix.enums,
                    gimli::DW_TAG_typedef => &mut ix.typedefs,
                    _ => continue,
                };
                if matches!(
                    e.attr_value(gimli::DW_AT_declaration)?,
                    Some(AttributeValue::Flag(true))
                ) {
                    continue;
                }
                let Some(name) = self.name(u, e) else {
                    continue;
                };
                if wanted.contains(name.as_str()) && !map.contains_key(&name) {
                    map.insert(
                        name,
                        TypeLoc {
                            unit: u,
                            offset: e.offset().0,
                        },
                    );
                }
            }
        }
        Ok(ix)
    }

    pub(super) fn entry(&self, loc: TypeLoc) -> Option<Die<'a, '_>> {
        self.units.get(loc.unit)?.entry(UnitOffset(loc.offset)).ok()
    }

    pub(super) fn name(&self, unit: usize, e: &Die<'a, '_>) -> Option<String> {
        let v = e.attr_value(gimli::DW_AT_name).ok()??;
        let s = self.dwarf.attr_string(self.units.get(unit)?, v).ok()?;
        Some(s.to_string_lossy().into_owned())
    }

    fn udata(e: &Die<'a, '_>, at: gimli::DwAt) -> Option<u64> {
        e.attr_value(at).ok()??.udata_value()
    }

    /// Resolves `DW_AT_type` (unit-local, section-relative or type-signature references).
    fn type_ref(&self, unit: usize, e: &Die<'a, '_>) -> Option<TypeLoc> {
        match e.attr_value(gimli::DW_AT_type).ok()?? {
            AttributeValue::UnitRef(off) => Some(TypeLoc {
                unit,
                offset: off.0,
            }),
            AttributeValue::DebugInfoRef(off) => {
                let i = self.starts.partition_point(|(s, _)| *s <= off.0);
                let (_, u) = *self.starts.get(i.checked_sub(1)?)?;
                let uo = off.to_unit_offset(&self.units.get(u)?.header)?;
                Some(TypeLoc {
                    unit: u,
                    offset: uo.0,
                })
            }
            AttributeValue::DebugTypesRef(sig) => self.signatures.get(&sig.0).copied(),
            _ => None,
        }
    }

    /// Follows typedef / const / volatile / atomic / restrict, and a declaration that names its
    /// type unit (`DW_AT_signature`, how a CU built with `-fdebug-types-section` refers to a
    /// type); `None` for `void`.
    fn peel(&self, mut loc: TypeLoc) -> Option<TypeLoc> {
        for _ in 0..MAX_DEPTH {
            let e = self.entry(loc)?;
            match e.tag() {
                gimli::DW_TAG_typedef
                | gimli::DW_TAG_const_type
                | gimli::DW_TAG_volatile_type
                | gimli::DW_TAG_atomic_type
                | gimli::DW_TAG_restrict_type => loc = self.type_ref(loc.unit, &e)?,
                _ => match e.attr_value(gimli::DW_AT_signature).ok().flatten() {
                    Some(AttributeValue::DebugTypesRef(sig)) => {
                        loc = *self.signatures.get(&sig.0)?;
                    }
                    _ => return Some(loc),
                },
            }
        }
        None
    }

    /// Children DIEs of `loc` with the given tag, as (offset) locations.
    fn children(&self, loc: TypeLoc, tag: gimli::DwTag) -> Vec<TypeLoc> {
        let mut out = Vec::new();
        let Some(unit) = self.units.get(loc.unit) else {
            return out;
        };
        let Ok(mut tree) = unit.entries_tree(Some(UnitOffset(loc.offset))) else {
            return out;
        };
        let Ok(root) = tree.root() else {
            return out;
        };
        let mut kids = root.children();
        while let Ok(Some(child)) = kids.next() {
            if child.entry().tag() == tag {
                out.push(TypeLoc {
                    unit: loc.unit,
                    offset: child.entry().offset().0,
                });
            }
        }
        out
    }

    /// The bound of one `DW_TAG_subrange_type`: count, or upper − lower + 1; 0 when absent
    /// (a flexible array member) or not a constant.
    fn bound(&self, sub: TypeLoc) -> u64 {
        let Some(e) = self.entry(sub) else { return 0 };
        if let Some(c) = Self::udata(&e, gimli::DW_AT_count) {
            return c;
        }
        let lower = Self::udata(&e, gimli::DW_AT_lower_bound).unwrap_or(0);
        let upper = match e.attr_value(gimli::DW_AT_upper_bound) {
            Ok(Some(AttributeValue::Sdata(v))) if v < 0 => return 0,
            Ok(Some(AttributeValue::Data4(0xffff_ffff))) => return 0,
            Ok(Some(v)) => match v.udata_value() {
                Some(u64::MAX) | None => return 0,
                Some(u) => u,
            },
            _ => return 0,
        };
        upper
            .checked_sub(lower)
            .and_then(|n| n.checked_add(1))
            .unwrap_or(0)
    }

    /// For a (peeled) array type: its element type and bounds, nested arrays flattened.
    fn array_shape(&self, mut loc: TypeLoc) -> Option<(Option<TypeLoc>, Vec<u64>)> {
        let mut dims = Vec::new();
        for _ in 0..MAX_DEPTH {
            let e = self.entry(loc)?;
            if e.tag() != gimli::DW_TAG_array_type {
                return Some((Some(loc), dims));
            }
            dims.extend(
                self.children(loc, gimli::DW_TAG_subrange_type)
                    .into_iter()
                    .map(|s| self.bound(s)),
            );
            let elem = self.type_ref(loc.unit, &e);
            match elem.and_then(|t| self.peel(t)) {
                Some(p) if self.entry(p)?.tag() == gimli::DW_TAG_array_type => loc = p,
                _ => return Some((elem, dims)),
            }
        }
        None
    }

    fn type_size(&self, loc: TypeLoc, depth: usize) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        // typedefs and qualifiers have their target's size
        let loc = self.peel(loc)?;
        let e = self.entry(loc)?;
        match e.tag() {
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type => Self::udata(&e, gimli::DW_AT_byte_size)
                .or_else(|| Some(u64::from(self.units.get(loc.unit)?.encoding().address_size))),
            gimli::DW_TAG_array_type => {
                if let Some(b) = Self::udata(&e, gimli::DW_AT_byte_size) {
                    return Some(b);
                }
                let (elem, dims) = self.array_shape(loc)?;
                let mut n = self.type_size(elem?, depth + 1)?;
                for d in dims {
                    n = n.checked_mul(d)?;
                }
                Some(n)
            }
            gimli::DW_TAG_subroutine_type => None,
            _ => Self::udata(&e, gimli::DW_AT_byte_size),
        }
    }

    fn type_name(&self, loc: Option<TypeLoc>, depth: usize) -> String {
        let Some(loc) = loc else {
            return "void".into();
        };
        if depth > MAX_DEPTH {
            return "?".into();
        }
        let Some(e) = self.entry(loc) else {
            return "?".into();
        };
        let inner = || self.type_name(self.type_ref(loc.unit, &e), depth + 1);
        let named = |kw: &str| match self.name(loc.unit, &e) {
            Some(n) => format!("{kw} {n}"),
            None => format!("{kw} {{...}}"),
        };
        match e.tag() {
            gimli::DW_TAG_base_type | gimli::DW_TAG_typedef => {
                self.name(loc.unit, &e).unwrap_or_else(|| "?".into())
            }
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => named("struct"),
            gimli::DW_TAG_union_type => named("union"),
            gimli::DW_TAG_enumeration_type => named("enum"),
            gimli::DW_TAG_pointer_type => {
                let i = inner();
                if i.ends_with('*') {
                    format!("{i}*")
                } else {
                    format!("{i} *")
                }
            }
            gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type | gimli::DW_TAG_atomic_type => {
                let kw = match e.tag() {
                    gimli::DW_TAG_const_type => "const",
                    gimli::DW_TAG_volatile_type => "volatile",
                    _ => "_Atomic",
                };
                let i = inner();
                if i.ends_with('*') {
                    format!("{i} {kw}")
                } else {
                    format!("{kw} {i}")
                }
            }
            gimli::DW_TAG_restrict_type => format!("{} restrict", inner()),
            gimli::DW_TAG_array_type => match self.array_shape(loc) {
                Some((elem, dims)) => {
                    let mut s = self.type_name(elem, depth + 1);
                    for d in dims {
                        s.push_str(&if d == 0 {
                            "[]".into()
                        } else {
                            format!("[{d}]")
                        });
                    }
                    s
                }
                None => "?[]".into(),
            },
            gimli::DW_TAG_subroutine_type => "fn(...)".into(),
            _ => "?".into(),
        }
    }

    /// `DW_AT_data_member_location`: a constant, or the `DW_OP_plus_uconst N` of old DWARF.
    fn member_offset(&self, loc: TypeLoc, e: &Die<'a, '_>) -> Option<u64> {
        match e.attr_value(gimli::DW_AT_data_member_location).ok()? {
            None => match Self::udata(e, gimli::DW_AT_data_bit_offset) {
                Some(bits) => Some(bits / 8),
                None => Some(0), // union members, and the first member in some producers
            },
            Some(AttributeValue::Exprloc(expr)) => {
                let enc = self.units.get(loc.unit)?.encoding();
                let mut ops = expr.operations(enc);
                match ops.next().ok()?? {
                    gimli::Operation::PlusConstant { value } => Some(value),
                    _ => None,
                }
            }
            Some(v) => v.udata_value(),
        }
    }

    fn read_member(&self, loc: TypeLoc) -> Option<DMember> {
        let e = self.entry(loc)?;
        let ty = self.type_ref(loc.unit, &e);
        let peeled = ty.and_then(|t| self.peel(t));
        let is_array = peeled
            .is_some_and(|p| self.entry(p).map(|d| d.tag()) == Some(gimli::DW_TAG_array_type));
        let (elem, dims) = match (is_array, peeled) {
            (true, Some(p)) => self.array_shape(p).unwrap_or((None, Vec::new())),
            _ => (ty, Vec::new()),
        };
        let elem_aggregate = elem.and_then(|t| self.peel(t)).filter(|p| {
            matches!(
                self.entry(*p).map(|d| d.tag()),
                Some(
                    gimli::DW_TAG_structure_type
                        | gimli::DW_TAG_union_type
                        | gimli::DW_TAG_class_type
                )
            )
        });
        Some(DMember {
            name: self.name(loc.unit, &e),
            offset: self.member_offset(loc, &e),
            size: ty.and_then(|t| self.type_size(t, 0)),
            type_name: self.type_name(elem, 0),
            dims,
            bit_size: Self::udata(&e, gimli::DW_AT_bit_size),
            elem_aggregate,
        })
    }

    pub(super) fn read_struct(&self, loc: TypeLoc, depth: usize) -> Option<DStruct> {
        if depth > MAX_DEPTH / 4 {
            return None;
        }
        let e = self.entry(loc)?;
        let kind = match e.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => "struct",
            gimli::DW_TAG_union_type => "union",
            _ => return None,
        };
        let members: Vec<DMember> = self
            .children(loc, gimli::DW_TAG_member)
            .into_iter()
            .filter_map(|m| self.read_member(m))
            .collect();
        let mut nested = Vec::new();
        for m in members
            .iter()
            .filter(|m| m.name.is_none() && m.dims.is_empty())
        {
            let (Some(inner), Some(base)) = (m.elem_aggregate, m.offset) else {
                continue;
            };
            if let Some(s) = self.read_struct(inner, depth + 1) {
                for mut n in s.members.into_iter().chain(s.nested) {
                    n.offset = n.offset.and_then(|o| o.checked_add(base));
                    nested.push(n);
                }
            }
        }
        let dwarf_name = self.name(loc.unit, &e);
        Some(DStruct {
            name: dwarf_name.clone().unwrap_or_default(),
            dwarf_name,
            kind,
            size: Self::udata(&e, gimli::DW_AT_byte_size),
            members,
            nested,
            via: None,
        })
    }

    pub(super) fn read_enum(&self, loc: TypeLoc) -> Option<DEnum> {
        let e = self.entry(loc)?;
        let size = Self::udata(&e, gimli::DW_AT_byte_size);
        let signed = self
            .type_ref(loc.unit, &e)
            .and_then(|t| self.peel(t))
            .and_then(|t| self.entry(t))
            .and_then(|b| b.attr_value(gimli::DW_AT_encoding).ok()?)
            .is_some_and(|v| {
                matches!(
                    v,
                    AttributeValue::Encoding(gimli::DW_ATE_signed | gimli::DW_ATE_signed_char)
                )
            });
        let mut members = Vec::new();
        for m in self.children(loc, gimli::DW_TAG_enumerator) {
            let Some(me) = self.entry(m) else { continue };
            let Some(name) = self.name(m.unit, &me) else {
                continue;
            };
            let value = match me.attr_value(gimli::DW_AT_const_value).ok().flatten() {
                Some(AttributeValue::Sdata(v)) => v,
                Some(AttributeValue::Udata(v)) => v as i64,
                Some(AttributeValue::Data1(v)) if signed => i64::from(v as i8),
                Some(AttributeValue::Data2(v)) if signed => i64::from(v as i16),
                Some(AttributeValue::Data4(v)) if signed => i64::from(v as i32),
                Some(v) => match v.udata_value() {
                    Some(u) => u as i64,
                    None => continue,
                },
                None => continue,
            };
            members.push((name, value));
        }
        Some(DEnum {
            name: self.name(loc.unit, &e).unwrap_or_default(),
            size,
            members,
        })
    }
}
