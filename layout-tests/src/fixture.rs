//! A C/C++ translation unit generated from the layout **facts** alone: every
//! struct of `layout-facts.toml` with each stated member at its stated offset and size, every
//! enum with its stated values, and the three `.rodata` category tables with their stated bytes.
//!
//! Its DWARF holds exactly what v2 pins and nothing of `nrt_core`'s tables, so the checker's
//! `--pinned` mode can be proven (pass, and fail naming the member when one is moved) whatever
//! state the Rust layouts are in. It is also shaped the way libnrt's own DWARF is:
//!
//! * structs alternate between `typedef struct { … } T;` (a typedef of an anonymous struct, as
//!   libnrt declares `tpb_t`) and `typedef struct T { … } T;`; in C++ the tagged ones are
//!   `class T { public: … };` and everything sits in `namespace nrt_fixture`;
//! * `tpb_t.sunda` is a member of an anonymous struct type, so no type is named `tpb_sunda_t`
//!   (the facts' name for it) and the checker must find it through the member;
//! * `nrt_tensor_storage_t.dmem` sits in an anonymous union (`union { void *dmem; uint8_t *vmem; }`);
//! * 40-byte `…lock` members are glibc's `pthread_mutex_t` (itself a typedef of an anonymous
//!   union) and 48-byte `…_cv` members `pthread_cond_t`;
//! * a member whose size the facts do not state fills the bytes up to the next stated member
//!   (`ht_node_t.key_type` is 8 bytes here, 4 in the project's tables): a size v2 does not state
//!   must not be checked.
//!
//! Gaps are `uint8_t _fixture_pad_<offset>[n]`. `_Static_assert`s (`static_assert` in C++) on
//! every size and offset make a generator mistake a compile error; `-DNRT_FIXTURE_NO_ASSERTS`
//! turns them off so a test can compile a deliberately mutated copy.

use std::fmt::Write as _;

use crate::ccheck::Lang;
use crate::facts::{Facts, FieldFact, StructFact, TABLE_SYMBOLS};

/// `(struct, member, type name in the facts)`: members whose type libnrt leaves anonymous; the
/// facts name the type, the fixture (like libnrt) does not.
pub const ANONYMOUS_MEMBER_TYPES: [(&str, &str, &str); 1] = [("tpb_t", "sunda", "tpb_sunda_t")];

/// `(struct, member, the other arm)`: members that sit in an anonymous union.
const ANONYMOUS_UNIONS: [(&str, &str, &str); 1] =
    [("nrt_tensor_storage_t", "dmem", "uint8_t *vmem")];

/// The fixture's C (or C++) source for `facts`; `tables = false` leaves the category tables
/// out (their symbols are then absent). Errors name a fact the generator cannot lay out.
pub fn facts_fixture(facts: &Facts, lang: Lang, tables: bool) -> Result<String, String> {
    let cxx = lang == Lang::Cxx;
    let mut o = String::from(
        "/* nrt-layout: DWARF fixture generated from layout-facts.toml alone. */\n\
         #include <stddef.h>\n#include <stdint.h>\n#include <pthread.h>\n\n",
    );
    o.push_str(if cxx {
        "#define FIXTURE_ASSERT(c) static_assert(c, #c)\n"
    } else {
        "#define FIXTURE_ASSERT(c) _Static_assert(c, #c)\n"
    });
    if cxx {
        o.push_str("\nnamespace nrt_fixture {\n");
    }
    for e in &facts.enums {
        let mut members: Vec<(&String, &i64)> = e.members.iter().collect();
        members.sort_by_key(|(n, v)| (**v, n.as_str()));
        let _ = writeln!(o, "\ntypedef enum {{");
        for (n, v) in &members {
            let _ = writeln!(o, "    {n} = {v},");
        }
        // An enum listed in part (`count` > listed members) gets unnamed-by-the-facts extras.
        let next = members.iter().map(|(_, v)| **v).max().unwrap_or(-1);
        for k in 0..e.whole_count().saturating_sub(members.len()) {
            let _ = writeln!(
                o,
                "    {}_FIXTURE_EXTRA_{k} = {},",
                e.name,
                next + 1 + k as i64
            );
        }
        let _ = writeln!(o, "}} {};", e.name);
    }
    let embedded: Vec<&str> = ANONYMOUS_MEMBER_TYPES.iter().map(|(_, _, t)| *t).collect();
    let emitted: Vec<&StructFact> = facts
        .structs
        .iter()
        .filter(|s| !embedded.contains(&s.name.as_str()))
        .collect();
    for (i, s) in emitted.iter().enumerate() {
        let body = struct_body(facts, s, "    ")?;
        let tagged = i % 2 == 1;
        let _ = writeln!(o);
        match (tagged, cxx) {
            (false, _) => {
                let _ = write!(o, "typedef struct {{\n{body}}} {};\n", s.name);
            }
            (true, false) => {
                let _ = write!(o, "typedef struct {0} {{\n{body}}} {0};\n", s.name);
            }
            (true, true) => {
                let _ = write!(o, "class {} {{\npublic:\n{body}}};\n", s.name);
            }
        }
        let _ = writeln!(o, "#ifndef NRT_FIXTURE_NO_ASSERTS");
        let _ = writeln!(o, "FIXTURE_ASSERT(sizeof({}) == {});", s.name, s.size);
        for f in placed(s) {
            let off = f.offset.unwrap_or(0);
            let _ = writeln!(
                o,
                "FIXTURE_ASSERT(offsetof({}, {}) == {off});",
                s.name, f.name
            );
        }
        let _ = writeln!(o, "#endif");
    }
    o.push('\n');
    for s in &emitted {
        let _ = writeln!(o, "{0} nrt_fixture_{0};", s.name);
    }
    for e in &facts.enums {
        let _ = writeln!(o, "{0} nrt_fixture_{0};", e.name);
    }
    if cxx {
        o.push_str("} /* namespace nrt_fixture */\n");
    }
    if tables {
        o.push_str(if cxx { "\nextern \"C\" {\n" } else { "\n" });
        for (key, symbol) in TABLE_SYMBOLS {
            let Some(bytes) = facts.tables.get(key) else {
                continue;
            };
            let list: Vec<String> = bytes.iter().map(|b| b.to_string()).collect();
            let _ = writeln!(o, "extern const uint8_t {symbol}[{}];", bytes.len());
            let _ = writeln!(
                o,
                "const uint8_t {symbol}[{}] = {{{}}};",
                bytes.len(),
                list.join(", ")
            );
        }
        if cxx {
            o.push_str("}\n");
        }
    }
    Ok(o)
}

/// The fields with an offset, in offset order.
fn placed(s: &StructFact) -> Vec<&FieldFact> {
    let mut v: Vec<&FieldFact> = s.fields.iter().filter(|f| f.offset.is_some()).collect();
    v.sort_by_key(|f| f.offset);
    v
}

fn scalar(size: usize) -> Option<&'static str> {
    Some(match size {
        1 => "uint8_t",
        2 => "uint16_t",
        4 => "uint32_t",
        8 => "uint64_t",
        _ => return None,
    })
}

/// The member declarations of `s`, padded to its size.
fn struct_body(facts: &Facts, s: &StructFact, indent: &str) -> Result<String, String> {
    let mut o = String::new();
    let mut at = 0usize;
    let fields = placed(s);
    for (i, f) in fields.iter().enumerate() {
        let off = f.offset.unwrap_or(0);
        if off < at {
            return Err(format!(
                "{}.{}: overlaps the member before it",
                s.name, f.name
            ));
        }
        if off > at {
            let _ = writeln!(o, "{indent}uint8_t _fixture_pad_{at}[{}];", off - at);
        }
        let next = fields.get(i + 1).and_then(|n| n.offset).unwrap_or(s.size);
        let extent = f.size.unwrap_or(next.saturating_sub(off));
        if extent == 0 {
            return Err(format!("{}.{}: no room", s.name, f.name));
        }
        let _ = writeln!(
            o,
            "{indent}{}",
            member_decl(facts, s, f, off, extent, indent)?
        );
        at = off + extent;
    }
    if s.size > at {
        let _ = writeln!(o, "{indent}uint8_t _fixture_pad_{at}[{}];", s.size - at);
    }
    Ok(o)
}

fn member_decl(
    facts: &Facts,
    s: &StructFact,
    f: &FieldFact,
    off: usize,
    extent: usize,
    indent: &str,
) -> Result<String, String> {
    let name = &f.name;
    if let Some((_, _, ty)) = ANONYMOUS_MEMBER_TYPES
        .iter()
        .find(|(p, m, _)| *p == s.name && m == name)
    {
        let inner = facts
            .struct_fact(ty)
            .ok_or_else(|| format!("{}.{name}: no struct {ty} in the facts", s.name))?;
        let body = struct_body(facts, inner, &format!("{indent}    "))?;
        return Ok(format!("struct {{\n{body}{indent}}} {name};"));
    }
    if let Some((_, _, other)) = ANONYMOUS_UNIONS
        .iter()
        .find(|(p, m, _)| *p == s.name && m == name)
    {
        return Ok(format!("union {{ void *{name}; {other}; }};"));
    }
    if f.count.is_none() {
        if extent == 40 && name.ends_with("lock") {
            return Ok(format!("pthread_mutex_t {name};"));
        }
        if extent == 48 && name.ends_with("_cv") {
            return Ok(format!("pthread_cond_t {name};"));
        }
        if let Some(t) = scalar(extent).filter(|_| off.is_multiple_of(extent) && f.size.is_some()) {
            return Ok(format!("{t} {name};"));
        }
        return Ok(format!("uint8_t {name}[{extent}];"));
    }
    let count = f.count.unwrap_or(1).max(1);
    if !extent.is_multiple_of(count) {
        return Err(format!(
            "{}.{name}: count {count} does not divide {extent}",
            s.name
        ));
    }
    let elem = extent / count;
    Ok(match scalar(elem).filter(|_| off.is_multiple_of(elem)) {
        Some(t) => format!("{t} {name}[{count}];"),
        None => format!("struct {{ uint8_t bytes[{elem}]; }} {name}[{count}];"),
    })
}
