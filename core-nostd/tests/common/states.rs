//! The state table of docs/STATES.md, parsed: shared by the Rust-layer test
//! (`core-nostd/tests/states.rs`) and the C-layer test (`ffi/tests/states.rs`, through
//! `#[path]`), so both check the one table the docs show.
#![allow(dead_code)]

/// The docs page.
pub const STATES_MD: &str = include_str!("../../../docs/STATES.md");

/// The three lifecycle states, in the table's column order.
pub const STATES: [&str; 3] = ["uninit", "init", "closed"];

/// What a call answers in one state: a status name (`NRT_CLOSED`), `value` or `n/a`.
pub type Cell = &'static str;

/// One row: the Rust call, the C function (either may be absent) and the three cells.
#[derive(Debug)]
pub struct Row {
    pub rust: Option<&'static str>,
    pub c: Option<&'static str>,
    pub cells: [Cell; 3],
}

fn name(cell: &'static str) -> Option<&'static str> {
    let t = cell.trim().trim_matches('`');
    (t != "—" && !t.is_empty()).then_some(t)
}

/// The rows of the table after the `states-table` marker.
pub fn table() -> Vec<Row> {
    let Some((_, after)) = STATES_MD.split_once("<!-- states-table") else {
        return Vec::new();
    };
    after
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .filter_map(|l| {
            let c: Vec<&'static str> = l.trim().trim_matches('|').split('|').collect();
            (c.len() == 5).then(|| Row {
                rust: name(c[0]),
                c: name(c[1]),
                cells: [c[2].trim(), c[3].trim(), c[4].trim()],
            })
        })
        .collect()
}

/// Checks one layer in one state against the table: `answer(name)` calls the layer's call of
/// that name (None: the test has none, an error), for the rows `names` gives a name and `only`
/// keeps. Returns every disagreement.
pub fn check(
    layer: &str,
    names: impl Fn(&Row) -> Option<&'static str>,
    state: usize,
    only: impl Fn(&str) -> bool,
    mut answer: impl FnMut(&str) -> Option<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for row in table() {
        let Some(n) = names(&row).filter(|n| only(n)) else {
            continue;
        };
        let want = row.cells[state];
        if want == "n/a" {
            continue;
        }
        match answer(n) {
            None => out.push(format!(
                "{layer}: `{n}` has a row but the test has no call for it"
            )),
            Some(got) if got != want => out.push(format!(
                "{layer}: `{n}` in state {}: table says {want}, the call answers {got}",
                STATES[state]
            )),
            Some(_) => {}
        }
    }
    out
}

/// [`check`] in `state` for every call but `last`, then for `last`: the call that changes the
/// state (init, close) is asked after every other one of its state.
pub fn check_state(
    layer: &str,
    names: impl Fn(&Row) -> Option<&'static str>,
    state: usize,
    last: &str,
    mut answer: impl FnMut(&str) -> Option<String>,
) -> Vec<String> {
    let mut out = check(layer, &names, state, |x| x != last, &mut answer);
    out.extend(check(layer, &names, state, |x| x == last, &mut answer));
    out
}
