//! The facts of one struct or enum, judged (module docs of `check`, "What fails"): the pinned
//! ones `layout-facts.toml` states, and the chosen ones the Rust tables place.

use super::*;

fn dims(d: &[impl std::fmt::Display]) -> String {
    if d.is_empty() {
        return "scalar".into();
    }
    d.iter().map(|x| format!("[{x}]")).collect()
}

pub(super) struct Judge {
    pub(super) strict: bool,
}

impl Judge {
    fn verdict(&self, pinned: bool, expected: &str, found: Option<&str>) -> (Status, bool) {
        match found {
            None => (Status::Missing, pinned || self.strict),
            Some(f) if f == expected => (Status::Pass, false),
            Some(_) if pinned || self.strict => (Status::Fail, true),
            Some(_) => (Status::Finding, false),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn fact(
        &self,
        subject: String,
        fact: &'static str,
        pinned: bool,
        provenance: &str,
        section: &str,
        expected: String,
        found: Option<String>,
        note: Option<String>,
    ) -> Fact {
        let (status, fails) = self.verdict(pinned, &expected, found.as_deref());
        Fact {
            subject,
            fact,
            pinned,
            provenance: provenance.to_string(),
            section: section.to_string(),
            expected,
            found,
            status,
            fails,
            note,
        }
    }

    fn info(&self, subject: String, fact: &'static str, section: &str, found: String) -> Fact {
        Fact {
            subject,
            fact,
            pinned: false,
            provenance: "reserved".into(),
            section: section.to_string(),
            expected: "-".into(),
            found: Some(found),
            status: Status::Info,
            fails: false,
            note: None,
        }
    }
}

fn at(m: &dwarf::DMember) -> String {
    format!(
        "@{} size {}",
        m.offset.map_or("?".into(), |v| v.to_string()),
        m.size.map_or("?".into(), |v| v.to_string())
    )
}

/// The facts v2 pins for one struct, and nothing else: its size, and per listed member the
/// offset, size and element count *where stated*. A member without a stated size (or count)
/// has none checked; the type names of members are never compared.
pub(super) fn pinned_struct_facts(
    sf: &StructFact,
    d: Option<&DStruct>,
    j: &Judge,
    out: &mut Vec<(Fact, u64)>,
) {
    let prov = sf.provenance.clone().unwrap_or_else(|| "observed".into());
    let Some(d) = d else {
        out.push((
            j.fact(
                sf.name.clone(),
                "type",
                true,
                &prov,
                &sf.section,
                "struct".into(),
                None,
                None,
            ),
            0,
        ));
        return;
    };
    let note = d.via.as_ref().map(|v| format!("found as {v}"));
    out.push((
        j.fact(
            sf.name.clone(),
            "size",
            true,
            &prov,
            &sf.section,
            sf.size.to_string(),
            d.size.map(|v| v.to_string()),
            note,
        ),
        0,
    ));
    let mut fields: Vec<&FieldFact> = sf.fields.iter().collect();
    fields.sort_by_key(|f| f.offset.unwrap_or(usize::MAX));
    for ff in fields {
        let subject = format!("{}.{}", sf.name, ff.name);
        let key = ff.offset.unwrap_or(usize::MAX) as u64;
        let fact = |what, expected: String, found: Option<String>, note| {
            j.fact(
                subject.clone(),
                what,
                true,
                &ff.provenance,
                &sf.section,
                expected,
                found,
                note,
            )
        };
        let Some(m) = d.member(&ff.name) else {
            let expected = match (ff.offset, ff.size) {
                (Some(o), Some(z)) => format!("@{o} size {z}"),
                (Some(o), None) => format!("@{o}"),
                _ => "member".into(),
            };
            out.push((fact("member", expected, None, None), key));
            continue;
        };
        if let Some(o) = ff.offset {
            out.push((
                fact(
                    "offset",
                    o.to_string(),
                    m.offset.map(|v| v.to_string()),
                    None,
                ),
                key,
            ));
        }
        if let Some(z) = ff.size {
            out.push((
                fact(
                    "member size",
                    z.to_string(),
                    m.size.map(|v| v.to_string()),
                    None,
                ),
                key,
            ));
        }
        if let Some(c) = ff.count {
            let n: u64 = m.dims.iter().product();
            let found = if m.dims.is_empty() {
                "scalar".to_string()
            } else {
                n.to_string()
            };
            let shape = (m.dims.len() > 1).then(|| format!("bounds {}", dims(&m.dims)));
            out.push((fact("count", c.to_string(), Some(found), shape), key));
        }
    }
}

/// The facts v2 pins for one enum: its size where stated, its member count, every listed value.
pub(super) fn pinned_enum_facts(
    ef: &EnumFact,
    d: Option<&DEnum>,
    j: &Judge,
    out: &mut Vec<(Fact, u64)>,
) {
    let prov = ef.provenance.clone().unwrap_or_else(|| "observed".into());
    let fact = |subject: String, what, expected: String, found: Option<String>| {
        (
            j.fact(
                subject,
                what,
                true,
                &prov,
                &ef.section,
                expected,
                found,
                None,
            ),
            0,
        )
    };
    let Some(d) = d else {
        out.push(fact(ef.name.clone(), "type", "enum".into(), None));
        return;
    };
    if let Some(z) = ef.size {
        out.push(fact(
            ef.name.clone(),
            "size",
            z.to_string(),
            d.size.map(|v| v.to_string()),
        ));
    }
    out.push(fact(
        ef.name.clone(),
        "count",
        ef.whole_count().to_string(),
        Some(d.members.len().to_string()),
    ));
    let mut members: Vec<(&String, &i64)> = ef.members.iter().collect();
    members.sort_by_key(|(n, v)| (**v, n.as_str()));
    for (n, v) in members {
        let found = d
            .members
            .iter()
            .find(|(dn, _)| dn == n)
            .map(|(_, dv)| dv.to_string());
        out.push(fact(
            format!("{}.{n}", ef.name),
            "value",
            v.to_string(),
            found,
        ));
    }
}

/// The project's own placements that the facts do not pin ("chosen"), compared with the Rust
/// tables: findings, never failures unless `--strict`. With `--all`, reserved spans and DWARF
/// members the tables lack are listed as `INFO`.
pub(super) fn chosen_struct_facts(
    s: &StructInfo,
    sf: Option<&StructFact>,
    d: Option<&DStruct>,
    j: &Judge,
    mode: Mode,
    out: &mut Vec<(Fact, u64)>,
) {
    let chosen = |subject: String, what, expected: String, found: Option<String>, note| {
        j.fact(
            subject, what, false, "chosen", s.section, expected, found, note,
        )
    };
    let Some(d) = d else {
        if sf.is_none() {
            out.push((
                chosen(s.name.to_string(), "type", "struct".into(), None, None),
                0,
            ));
        }
        return;
    };
    if sf.is_none() {
        let note = d.via.as_ref().map(|v| format!("found as {v}"));
        out.push((
            chosen(
                s.name.to_string(),
                "size",
                s.size.to_string(),
                d.size.map(|v| v.to_string()),
                note,
            ),
            0,
        ));
    }
    for f in s.fields {
        let subject = format!("{}.{}", s.name, f.name);
        let key = f.offset as u64;
        if crate::is_reserved(f) {
            if mode == Mode::All {
                let (lo, hi) = (f.offset as u64, (f.offset + f.size) as u64);
                let inside: Vec<String> = d
                    .members
                    .iter()
                    .filter(|m| {
                        let o = m.offset.unwrap_or(u64::MAX);
                        let e = o.saturating_add(m.size.unwrap_or(0));
                        o < hi && e > lo
                    })
                    .map(|m| format!("{}{}", m.name.as_deref().unwrap_or("<anon>"), at(m)))
                    .collect();
                let found = if inside.is_empty() {
                    "no DWARF member here".to_string()
                } else {
                    inside.join(" ")
                };
                out.push((
                    j.info(
                        subject,
                        "reserved",
                        s.section,
                        format!("{lo}..{hi}: {found}"),
                    ),
                    key,
                ));
            }
            continue;
        }
        let ff = sf.and_then(|sf| sf.field(f.name));
        let Some(m) = d.member(f.name) else {
            if ff.is_none() {
                let expected = format!("@{} size {}", f.offset, f.size);
                out.push((chosen(subject, "member", expected, None, None), key));
            }
            continue;
        };
        if ff.and_then(|ff| ff.offset).is_none() {
            let found = m.offset.map(|v| v.to_string());
            out.push((
                chosen(subject.clone(), "offset", f.offset.to_string(), found, None),
                key,
            ));
        }
        if ff.and_then(|ff| ff.size).is_none() {
            let found = m.size.map(|v| v.to_string());
            out.push((
                chosen(
                    subject.clone(),
                    "member size",
                    f.size.to_string(),
                    found,
                    None,
                ),
                key,
            ));
        }
        // The shape (`[8][23]` vs `[23][8]`) is the project's even where v2 pins the count.
        if f.ndims > 0 || !m.dims.is_empty() {
            let found = Some(dims(&m.dims));
            out.push((chosen(subject, "bounds", dims(f.dims()), found, None), key));
        }
    }
    if mode == Mode::All {
        for m in &d.members {
            let known = m.name.as_deref().is_some_and(|n| {
                s.field(n).is_some() || sf.is_some_and(|sf| sf.field(n).is_some())
            });
            if known {
                continue;
            }
            let name = m.name.as_deref().unwrap_or("<anon>");
            let mut decl = format!("{} {name}", m.type_name);
            decl.push_str(&m.dims.iter().map(|x| format!("[{x}]")).collect::<String>());
            out.push((
                j.info(
                    format!("{}.{name}", s.name),
                    "extra",
                    s.section,
                    format!("{decl} {}", at(m)),
                ),
                m.offset.unwrap_or(0),
            ));
        }
    }
}

pub(super) fn chosen_enum_facts(
    e: &EnumInfo,
    ef: Option<&EnumFact>,
    d: Option<&DEnum>,
    j: &Judge,
    mode: Mode,
    out: &mut Vec<(Fact, u64)>,
) {
    let chosen = |subject: String, what, expected: String, found: Option<String>| {
        (
            j.fact(
                subject, what, false, "chosen", e.section, expected, found, None,
            ),
            0,
        )
    };
    let Some(d) = d else {
        if ef.is_none() {
            out.push(chosen(e.name.to_string(), "type", "enum".into(), None));
        }
        return;
    };
    if ef.and_then(|ef| ef.size).is_none() {
        out.push(chosen(
            e.name.to_string(),
            "size",
            e.size.to_string(),
            d.size.map(|v| v.to_string()),
        ));
    }
    if ef.is_none() {
        out.push(chosen(
            e.name.to_string(),
            "count",
            e.members.len().to_string(),
            Some(d.members.len().to_string()),
        ));
    }
    for (n, v) in e.members {
        if ef.is_some_and(|ef| ef.members.contains_key(*n)) {
            continue;
        }
        let found = d
            .members
            .iter()
            .find(|(dn, _)| dn == n)
            .map(|(_, dv)| dv.to_string());
        out.push(chosen(
            format!("{}.{n}", e.name),
            "value",
            v.to_string(),
            found,
        ));
    }
    if mode == Mode::All {
        for (dn, dv) in &d.members {
            let known = e.members.iter().any(|(n, _)| n == dn)
                || ef.is_some_and(|ef| ef.members.contains_key(dn));
            if !known {
                let ours = e
                    .members
                    .iter()
                    .find(|(_, v)| v == dv)
                    .map_or("no member".to_string(), |(n, _)| format!("ours: {n}"));
                out.push((
                    j.info(
                        format!("{}.{dn}", e.name),
                        "extra",
                        e.section,
                        format!("{dn} = {dv} ({ours})"),
                    ),
                    0,
                ));
            }
        }
    }
}
