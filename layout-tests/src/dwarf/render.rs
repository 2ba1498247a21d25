//! The reader's views for people: the struct aliases the ABI tables and the spec's facts imply,
//! and a DWARF struct or enum rendered as C (`nrt-layout dump`).

use super::*;

/// Every `(target, parent, member)` alias the ABI tables imply: each struct embedded by value
/// is also reachable as the type of its embedding member.
pub fn table_aliases() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for parent in nrt_core::abi::STRUCTS {
        for f in parent.fields {
            if crate::embedded_struct(f).is_some() {
                out.push((
                    f.c_base.to_string(),
                    parent.name.to_string(),
                    f.name.to_string(),
                ));
            }
        }
    }
    out
}

/// Candidate `(target, parent, member)` aliases from the facts alone: a member whose stated size
/// is `count` × another struct's stated size may embed that struct. Meant for
/// [`Request::anonymous_aliases`] (`tpb_t.sunda` for `tpb_sunda_t`, which libnrt's DWARF leaves
/// anonymous), where a member of a named type is never taken for another.
pub fn facts_aliases(facts: &crate::facts::Facts) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for target in &facts.structs {
        for parent in facts.structs.iter().filter(|p| p.name != target.name) {
            for f in &parent.fields {
                let n = f.count.unwrap_or(1);
                if f.size.is_some() && f.size == target.size.checked_mul(n) {
                    out.push((target.name.clone(), parent.name.clone(), f.name.clone()));
                }
            }
        }
    }
    out
}

fn decl(m: &DMember) -> String {
    let mut s = m.name.clone().unwrap_or_default();
    for d in &m.dims {
        s.push_str(&if *d == 0 {
            "[]".into()
        } else {
            format!("[{d}]")
        });
    }
    if let Some(b) = m.bit_size {
        s.push_str(&format!(":{b}"));
    }
    s.push(';');
    s
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "?".into(), |v| v.to_string())
}

/// pahole-style text for one struct/union.
pub fn render_struct(s: &DStruct) -> String {
    let mut o = String::new();
    let title = s.dwarf_name.clone().unwrap_or_else(|| "{...}".into());
    o.push_str(&format!("{} {} {{", s.kind, title));
    if let Some(v) = &s.via {
        o.push_str(&format!(" /* {} found as {v} */", s.name));
    }
    o.push('\n');
    let mut end: u64 = 0;
    for m in &s.members {
        if s.kind == "struct" {
            if let Some(off) = m.offset {
                if off > end {
                    o.push_str(&format!(
                        "\n\t/* XXX {} bytes hole, try to pack */\n\n",
                        off - end
                    ));
                }
            }
        }
        o.push_str(&format!(
            "\t{:<26} {:<21} /* {:>5} {:>5} */\n",
            m.type_name,
            decl(m),
            opt(m.offset),
            opt(m.size)
        ));
        if let (Some(off), Some(size)) = (m.offset, m.size) {
            end = end.max(off.saturating_add(size));
        }
    }
    let size = s.size.unwrap_or(0);
    o.push('\n');
    o.push_str(&format!(
        "\t/* size: {}, cachelines: {}, members: {} */\n",
        opt(s.size),
        size.div_ceil(64),
        s.members.len()
    ));
    if s.kind == "struct" && size > end && !s.members.is_empty() {
        o.push_str(&format!("\t/* padding: {} */\n", size - end));
    }
    o.push_str("};\n");
    o
}

/// pahole-style text for one enum.
pub fn render_enum(e: &DEnum) -> String {
    let mut o = format!("enum {} {{\n", e.name);
    for (n, v) in &e.members {
        o.push_str(&format!("\t{n} = {v},\n"));
    }
    o.push_str(&format!("}}; /* size: {} */\n", opt(e.size)));
    o
}

/// `nrt-layout dump <ELF> --struct NAME`: a pahole-style view of one struct (or enum) from the
/// ELF's DWARF. Types this project names but libnrt embeds anonymously (`tpb_sunda_t`) are found
/// through their embedding member.
pub fn dump(elf: &Path, name: &str) -> Result<String, DwarfError> {
    let facts_aliases = crate::facts::Facts::vendored()
        .map(facts_aliases)
        .unwrap_or_default();
    let mut aliases = table_aliases();
    let mut structs = vec![name.to_string()];
    // Pull in the chain of parents that can reach `name` through an alias.
    let mut i = 0;
    while i < structs.len() && i < 64 {
        let want = structs[i].clone();
        for (t, p, _) in aliases.iter().chain(&facts_aliases) {
            if *t == want && !structs.contains(p) {
                structs.push(p.clone());
            }
        }
        i += 1;
    }
    aliases.retain(|(t, _, _)| structs.contains(t));
    let anonymous_aliases = facts_aliases
        .into_iter()
        .filter(|(t, _, _)| structs.contains(t))
        .collect();
    let req = Request {
        structs,
        enums: vec![name.to_string()],
        aliases,
        anonymous_aliases,
        symbols: Vec::new(),
    };
    let ex = extract(elf, &req)?;
    if let Some(s) = ex.structs.get(name) {
        return Ok(render_struct(s));
    }
    if let Some(e) = ex.enums.get(name) {
        return Ok(render_enum(e));
    }
    Err(DwarfError::NoSuchType {
        path: elf.to_path_buf(),
        name: name.to_string(),
    })
}
