//! Tier 2: the KELF descriptor (neff-format §7): its version, target architecture and graphs.

use super::*;

/// HAL architecture numbers (§7): SUNDA (trn1/inf2).
pub const ARCH_SUNDA: u32 = 2;
/// CAYMAN (trn2).
pub const ARCH_CAYMAN: u32 = 3;
/// MARIANA (trn3).
pub const ARCH_MARIANA: u32 = 4;

/// Tier 2: the KELF descriptor (§7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kelf {
    /// Member name (`kelf-a.json`).
    pub member: String,
    /// `version` (`"MAJOR.MINOR[-suffix]"`).
    pub version: String,
    /// `target` as written.
    pub target: String,
    /// The HAL arch the target names; `None` for `"*"` (the live device's).
    pub arch: Option<u32>,
    /// `graphs[]`: `(name, definition)`.
    pub graphs: Vec<(String, String)>,
}

/// Tier 2 (§7).
pub(crate) fn parse_kelf(ar: &View<'_>, member: &str) -> Result<Kelf> {
    if !ar.has(member)? {
        return Err(NeffError::invalid(format!(
            "Failed to get KELF member {member} named by neff.json"
        )));
    }
    let v = parse_json(ar, member)?;
    let ctx = |e: NeffError| e.context(member);
    let version = v
        .get("version")
        .map(|x| as_str(x, "version"))
        .transpose()
        .map_err(ctx)?
        .unwrap_or("")
        .to_string();
    if !version.contains('.') {
        return Err(ctx(NeffError::invalid(format!(
            "Invalid KELF version '{version}'"
        ))));
    }
    let target = v
        .get("target")
        .map(|x| as_str(x, "target"))
        .transpose()
        .map_err(ctx)?
        .unwrap_or("")
        .to_string();
    let arch = match target.as_str() {
        "sunda" | "v2" | "" => Some(ARCH_SUNDA),
        "cayman" | "v3" => Some(ARCH_CAYMAN),
        "mariana" | "v4" => Some(ARCH_MARIANA),
        "*" => None,
        t => return Err(ctx(NeffError::invalid(format!("Invalid target '{t}'")))),
    };
    let graphs = v
        .get("graphs")
        .ok_or_else(|| ctx(NeffError::invalid("missing <graphs>")))?;
    let graphs = as_array(graphs, "graphs")
        .map_err(ctx)?
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let def = g
                .get("definition")
                .ok_or_else(|| NeffError::invalid(format!("graphs[{i}] has no definition")))
                .and_then(|d| as_str(d, "graphs[].definition"))?;
            let name = g
                .get("name")
                .and_then(Value::as_str)
                .map_or_else(|| format!("sg{i:02}"), str::to_string);
            Ok((name, def.to_string()))
        })
        .collect::<Result<Vec<_>>>()
        .map_err(ctx)?;
    if graphs.is_empty() {
        return Err(ctx(NeffError::invalid("KELF has no graphs")));
    }
    Ok(Kelf {
        member: member.to_string(),
        version,
        target,
        arch,
        graphs,
    })
}
