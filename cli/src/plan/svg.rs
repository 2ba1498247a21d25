//! `plan --svg`: the plan as a picture that reads without hovering. One horizontal bar per
//! HBM channel (`<g class="channel">`) on a common byte scale with ticks in binary units; each
//! run of allocations of one usage and owner drawn at its address, coloured by usage type
//! (other processes' hatched grey), with its bytes written on it where they fit; under the
//! bar, the extent of each model of the plan on the channel with its name; under those, each
//! model the channel refused (`class="failed"`): a red hatched bar as long as what it needs
//! there, and what it needed and the verdict in words. A legend closes it. Every element
//! keeps a `<title>` with the exact figures.

use nrt_host::plan::{Block, HbmPlan, Plan, Verdict};

use crate::scenario::fmt_bytes;

/// Colours for the usage types of a plan, assigned in legend order (most bytes first). A categorical
/// palette picked for distance in CIELAB: any two differ by ΔE*76 ≥ 22, the first twelve by
/// ≥ 37, every one from the free-space grey, the other-process grey and the failure red
/// (tested below). There are as many as usage types (22).
const PALETTE: [&str; 22] = [
    "#1f78b4", "#dcd300", "#e7298a", "#008856", "#8c564b", "#f38400", "#6a3d9a", "#dbdb8d",
    "#f7b6d2", "#66a61e", "#17becf", "#fb8072", "#a6761d", "#e377c2", "#a1caf1", "#ffbb78",
    "#b3446c", "#e6ab02", "#98df8a", "#b07aa1", "#c49c94", "#7570b3",
];
/// Free space.
const FREE: &str = "#eeeeee";
/// Other processes' blocks (hatched).
const OTHER: &str = "#5a5a5a";
/// What a refused model needs (hatched, outlined).
const FAILED: &str = "#c00000";
/// A usage drawn when the palette is exhausted (cannot happen with the 22 usage types).
const SPARE: &str = "#777777";

/// Width of the channel names' column.
const NAME_W: f64 = 80.0;
/// Width of the longest channel's bar.
const BAR_W: f64 = 760.0;
/// Width of the figures column right of the bars.
const FIGS_W: f64 = 340.0;
/// Height of a channel's bar.
const BAR_H: f64 = 26.0;
/// Height of a lane of model names.
const LANE_H: f64 = 15.0;
/// Lanes of model names per channel (a model whose extent overlaps one in every lane keeps
/// only its title).
const LANES: usize = 3;
/// Height of a refused model's row: its bar and a line of text.
const FAIL_H: f64 = 30.0;
/// Refused models drawn per channel (the text report and the JSON list all of them).
const MAX_FAILED_ROWS: usize = 4;
/// Approximate advance of a character of the 10-px labels.
const CHAR_W: f64 = 6.0;

fn xml_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if c.is_control() => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// `s` cut to at most `n` characters, an ellipsis ending a cut one; empty when `n` < 2.
fn fit(s: &str, n: usize) -> String {
    let len = s.chars().count();
    if len <= n {
        s.to_string()
    } else if n < 2 {
        String::new()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// The byte scale's tick step for channels of up to `max` bytes: the smallest "round" step
/// in binary units (1, 2, 4, 5, 8, … × KiB, MiB, GiB, TiB) that leaves at most 8 intervals.
fn tick_step(max: u64) -> u64 {
    const MULTS: [u64; 14] = [1, 2, 4, 5, 8, 10, 16, 20, 32, 50, 64, 100, 128, 256];
    for unit in [1u64 << 10, 1 << 20, 1 << 30, 1 << 40] {
        for m in MULTS {
            let step = m * unit;
            if max.div_ceil(step) <= 8 {
                return step;
            }
        }
    }
    max.max(1)
}

/// Text colour readable on `fill` (`#rrggbb`): black on light colours, white on dark.
fn ink(fill: &str) -> &'static str {
    let c = |i: usize| {
        u8::from_str_radix(fill.get(i..i + 2).unwrap_or("00"), 16).unwrap_or(0) as f64 / 255.0
    };
    let lum = 0.2126 * c(1) + 0.7152 * c(3) + 0.0722 * c(5);
    if lum > 0.45 {
        "#000000"
    } else {
        "#ffffff"
    }
}

/// Consecutive blocks of one usage and owner, drawn as one.
struct Run<'a> {
    offset: u64,
    end: u64,
    bytes: u64,
    blocks: usize,
    first: &'a Block,
}

/// `h`'s blocks as runs: address-ordered blocks of one usage, model and owner whose gap is
/// under `min_gap` bytes (less than can be seen) merge.
fn runs(h: &HbmPlan, min_gap: u64) -> Vec<Run<'_>> {
    let mut out: Vec<Run<'_>> = Vec::new();
    for b in &h.blocks {
        let end = b.offset.saturating_add(b.size);
        if let Some(r) = out.last_mut() {
            if r.first.usage == b.usage
                && r.first.model == b.model
                && r.first.owner_pid == b.owner_pid
                && b.offset >= r.end
                && b.offset - r.end <= min_gap
            {
                r.end = end;
                r.bytes = r.bytes.saturating_add(b.size);
                r.blocks += 1;
                continue;
            }
        }
        out.push(Run {
            offset: b.offset,
            end,
            bytes: b.size,
            blocks: 1,
            first: b,
        });
    }
    out
}

/// Whether a block is another process's.
fn is_other(b: &Block) -> bool {
    b.owner_pid.is_some()
}

/// The colours of a plan: its own usage types, the one with the most bytes first (the first
/// colours of [`PALETTE`] stand furthest apart).
struct Colours {
    usages: Vec<String>,
}

impl Colours {
    fn of(p: &Plan) -> Self {
        let mut by: Vec<(String, u64)> = Vec::new();
        for b in p.hbm.iter().flat_map(|h| h.blocks.iter()) {
            if is_other(b) {
                continue;
            }
            match by.iter_mut().find(|(u, _)| *u == b.usage) {
                Some((_, n)) => *n = n.saturating_add(b.size),
                None => by.push((b.usage.clone(), b.size)),
            }
        }
        by.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Colours {
            usages: by.into_iter().map(|(u, _)| u).collect(),
        }
    }

    fn fill(&self, b: &Block) -> String {
        if is_other(b) {
            return "url(#other)".into();
        }
        self.colour(&b.usage).into()
    }

    fn colour(&self, usage: &str) -> &'static str {
        self.usages
            .iter()
            .position(|u| u == usage)
            .and_then(|i| PALETTE.get(i))
            .copied()
            .unwrap_or(SPARE)
    }
}

/// A model's label in the chart: `#3 resnet50`.
fn model_label(p: &Plan, i: usize) -> String {
    let name = p.models.get(i).map_or("", |m| m.name.as_str());
    format!("#{i} {name}")
}

/// The SVG chart of plan `p` (module docs).
pub fn svg(p: &Plan) -> String {
    let colours = Colours::of(p);
    let max = p.hbm.iter().map(|h| h.channel_size).max().unwrap_or(0);
    let scale = if max == 0 { 0.0 } else { BAR_W / max as f64 };
    let x0 = NAME_W;
    let width = NAME_W + BAR_W + FIGS_W;
    let mut body = String::new();

    // The scale: ticks in binary units above the bars, grid lines through them.
    let top = 58.0;
    let mut y = top;
    let mut rows = String::new();
    for h in &p.hbm {
        let (g, hgt) = channel(p, h, y, scale, &colours);
        rows.push_str(&g);
        y += hgt;
    }
    let bottom = y;
    let step = tick_step(max);
    let mut axis = String::from("<g class=\"axis\">\n");
    let mut t = 0u64;
    while t <= max && max > 0 {
        let x = x0 + t as f64 * scale;
        axis.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" stroke=\"#bbbbbb\" \
             stroke-dasharray=\"2,3\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" \
             text-anchor=\"middle\">{}</text>\n",
            top - 8.0,
            top - 12.0,
            xml_escape(&fmt_bytes(t))
        ));
        t = match t.checked_add(step) {
            Some(n) => n,
            None => break,
        };
    }
    axis.push_str(&format!(
        "<line x1=\"{x0}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#666666\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#444444\">address in the channel</text>\n</g>\n",
        top - 8.0,
        x0 + max as f64 * scale,
        top - 8.0,
        x0 + BAR_W + 30.0,
        top - 12.0,
    ));
    body.push_str(&axis);
    body.push_str(&rows);

    // Models that do not fit with no channel to show them on (an arena, host memory).
    let mut y = bottom + 6.0;
    let unplaced: Vec<usize> = (0..p.models.len())
        .filter(|&i| !p.models[i].fits && p.models[i].refusal.is_none())
        .collect();
    for &i in unplaced.iter().take(MAX_FAILED_ROWS) {
        let m = &p.models[i];
        body.push_str(&format!(
            "<text class=\"failed\" data-model=\"{i}\" x=\"10\" y=\"{:.1}\" fill=\"{FAILED}\">\
             ✗ {} needs {}: {}</text>\n",
            y + 12.0,
            xml_escape(&model_label(p, i)),
            fmt_bytes(m.needed_bytes),
            xml_escape(&fit(m.error.as_deref().unwrap_or("does not fit"), 140))
        ));
        y += 18.0;
    }
    if unplaced.len() > MAX_FAILED_ROWS {
        body.push_str(&format!(
            "<text x=\"10\" y=\"{:.1}\" fill=\"{FAILED}\">… and {} more models that do not fit \
             (see the report)</text>\n",
            y + 12.0,
            unplaced.len() - MAX_FAILED_ROWS
        ));
        y += 18.0;
    }
    let (legend, legend_h) = legend(p, &colours, y + 10.0);
    body.push_str(&legend);
    let height = y + 10.0 + legend_h + 10.0;

    let fit_count = p.models.iter().filter(|m| m.fits).count();
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{width}\" height=\"{height:.0}\" viewBox=\"0 0 {width} {height:.0}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <defs>\
         <pattern id=\"failed\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
         patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fbe3e3\"/>\
         <line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"{FAILED}\" stroke-width=\"2\"/>\
         </pattern>\
         <pattern id=\"other\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
         patternTransform=\"rotate(-45)\"><rect width=\"6\" height=\"6\" fill=\"{OTHER}\"/>\
         <line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#9a9a9a\" stroke-width=\"2\"/>\
         </pattern></defs>\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
    );
    s.push_str(&format!(
        "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{} · LNC {} · HBM \
         occupancy after placement: {} of {} models fit</text>\n",
        xml_escape(&p.device),
        p.lnc_size,
        fit_count,
        p.models.len()
    ));
    if let Some(n) = &p.snapshot {
        s.push_str(&format!(
            "<text x=\"10\" y=\"36\" font-size=\"10\" fill=\"#444444\">{}</text>\n",
            xml_escape(&fit(n, 200))
        ));
    }
    s.push_str(&body);
    s.push_str("</svg>\n");
    s
}

/// One channel's group at `y`: its bar, model lanes and refused models. Returns the SVG and
/// its height.
fn channel(p: &Plan, h: &HbmPlan, y: f64, scale: f64, colours: &Colours) -> (String, f64) {
    let x0 = NAME_W;
    let bar_w = h.channel_size as f64 * scale;
    let mut s = format!(
        "<g class=\"channel\" data-device=\"{}\" data-hbm=\"{}\">\n\
         <text x=\"10\" y=\"{:.1}\" font-weight=\"bold\">nd{} hbm{}</text>\n\
         <rect x=\"{x0}\" y=\"{y:.1}\" width=\"{bar_w:.2}\" height=\"{BAR_H}\" fill=\"{FREE}\" \
         stroke=\"#999999\"><title>nd{} hbm{}: {} free, largest free block {}</title></rect>\n",
        h.device,
        h.hbm,
        y + BAR_H * 0.65,
        h.device,
        h.hbm,
        h.device,
        h.hbm,
        fmt_bytes(h.free),
        fmt_bytes(h.largest_free)
    );
    // Blocks closer than half a pixel merge into one run.
    let min_gap = if scale > 0.0 {
        (0.5 / scale) as u64
    } else {
        u64::MAX
    };
    for r in runs(h, min_gap) {
        let x = x0 + r.offset as f64 * scale;
        let w = ((r.end - r.offset) as f64 * scale).max(0.5);
        let b = r.first;
        let owner = match (b.model, b.owner_pid) {
            (Some(i), _) => format!(", {}", model_label(p, i)),
            (None, Some(pid)) => format!(", process {pid}"),
            (None, None) => String::new(),
        };
        s.push_str(&format!(
            "<rect class=\"block\" x=\"{x:.2}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{BAR_H}\" \
             fill=\"{}\"><title>{}{}: {} in {} block(s) at 0x{:x}</title></rect>\n",
            colours.fill(b),
            xml_escape(&b.usage),
            xml_escape(&owner),
            fmt_bytes(r.bytes),
            r.blocks,
            r.offset
        ));
        let label = fmt_bytes(r.bytes);
        if label.chars().count() as f64 * CHAR_W + 4.0 <= w {
            let ink = if is_other(b) {
                "#ffffff"
            } else {
                ink(colours.colour(&b.usage))
            };
            s.push_str(&format!(
                "<text class=\"bytes\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" \
                 text-anchor=\"middle\" fill=\"{ink}\">{label}</text>\n",
                x + w / 2.0,
                y + BAR_H * 0.65
            ));
        }
    }
    s.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">used {} · free {} · largest free \
         block {}</text>\n",
        NAME_W + BAR_W + 10.0,
        y + BAR_H * 0.65,
        fmt_bytes(h.used),
        fmt_bytes(h.free),
        fmt_bytes(h.largest_free)
    ));
    let mut hgt = BAR_H + 4.0;

    // The models' extents on the channel, in lanes: each stretch of a model's blocks (its
    // blocks in address order, with no other model's between them and gaps under a few
    // pixels) gets a bracket; the largest stretch of each model gets its name and bytes.
    let max_gap = if scale > 0.0 {
        (8.0 / scale) as u64
    } else {
        u64::MAX
    };
    let mut spans: Vec<Span> = Vec::new();
    let mut open: Option<Span> = None;
    for b in &h.blocks {
        let Some(i) = b.model else { continue };
        let end = b.offset.saturating_add(b.size);
        match open.as_mut() {
            Some(o) if o.model == i && b.offset.saturating_sub(o.end) <= max_gap => {
                o.end = o.end.max(end);
                o.bytes = o.bytes.saturating_add(b.size);
            }
            _ => {
                spans.extend(open.take());
                open = Some(Span {
                    model: i,
                    start: b.offset,
                    end,
                    bytes: b.size,
                });
            }
        }
    }
    spans.extend(open);
    let mut total: Vec<(usize, u64, usize)> = Vec::new();
    for (k, sp) in spans.iter().enumerate() {
        match total.iter_mut().find(|t| t.0 == sp.model) {
            Some(t) => {
                t.1 = t.1.saturating_add(sp.bytes);
                if sp.bytes > spans[t.2].bytes {
                    t.2 = k;
                }
            }
            None => total.push((sp.model, sp.bytes, k)),
        }
    }
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&k| (spans[k].start, spans[k].model));
    let mut lane_end = [f64::MIN; LANES];
    let mut used_lanes = 0;
    for k in order {
        let sp = &spans[k];
        let (x1, x2) = (x0 + sp.start as f64 * scale, x0 + sp.end as f64 * scale);
        let Some(lane) = (0..LANES).find(|&l| lane_end[l] <= x1) else {
            continue;
        };
        let ly = y + hgt + lane as f64 * LANE_H;
        let (bytes, named) = total
            .iter()
            .find(|t| t.0 == sp.model)
            .map_or((sp.bytes, false), |t| (t.1, t.2 == k));
        if !named && x2 - x1 < 3.0 {
            continue;
        }
        let room = ((x2 - x1 - 2.0) / CHAR_W).floor().max(0.0) as usize;
        let text = if named {
            span_label(p, sp.model, bytes, room)
        } else {
            String::new()
        };
        let text_end = x1 + 1.0 + text.chars().count() as f64 * CHAR_W;
        lane_end[lane] = x2.max(text_end) + 3.0;
        used_lanes = used_lanes.max(lane + 1);
        s.push_str(&format!(
            "<g class=\"model\" data-model=\"{}\"><title>{}: {} of its {} on this channel, \
             from {} to {}</title><path d=\"M{x1:.1},{:.1} v4 H{:.1} v-4\" fill=\"none\" \
             stroke=\"#333333\"/>",
            sp.model,
            xml_escape(&model_label(p, sp.model)),
            fmt_bytes(sp.bytes),
            fmt_bytes(bytes),
            fmt_bytes(sp.start),
            fmt_bytes(sp.end),
            ly + 1.0,
            x2.max(x1 + 1.0),
        ));
        if !text.is_empty() {
            s.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{}</text>",
                x1 + 1.0,
                ly + 14.0,
                xml_escape(&text)
            ));
        }
        s.push_str("</g>\n");
    }
    hgt += used_lanes as f64 * LANE_H + if used_lanes > 0 { 6.0 } else { 0.0 };

    // The models this channel refused: what each needs here, hatched, and the verdict.
    let refused: Vec<usize> = (0..p.models.len())
        .filter(|&i| {
            p.models[i]
                .refusal
                .as_ref()
                .is_some_and(|r| r.device == h.device && r.hbm == h.hbm)
        })
        .collect();
    for &i in refused.iter().take(MAX_FAILED_ROWS) {
        let m = &p.models[i];
        let Some(r) = &m.refusal else { continue };
        let needed = r.needed.unwrap_or(m.needed_bytes);
        let w = (needed.min(h.channel_size) as f64 * scale).max(2.0);
        let fy = y + hgt;
        let text = failure_line(p, i, needed);
        s.push_str(&format!(
            "<g class=\"failed\" data-model=\"{i}\" data-verdict=\"{}\">\
             <rect x=\"{x0}\" y=\"{fy:.1}\" width=\"{w:.2}\" height=\"10\" fill=\"url(#failed)\" \
             stroke=\"{FAILED}\" stroke-width=\"1.5\"><title>{}</title></rect>{}\
             <text x=\"{x0}\" y=\"{:.1}\" font-size=\"11\" fill=\"{FAILED}\">{}</text></g>\n",
            verdict_key(r.verdict),
            xml_escape(&format!("{text}. {}", r.summary)),
            if needed > h.channel_size {
                format!(
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"{FAILED}\">▶ more \
                     than the channel</text>",
                    x0 + w + 4.0,
                    fy + 9.0
                )
            } else {
                String::new()
            },
            fy + 23.0,
            xml_escape(&fit(&text, ((BAR_W + FIGS_W - 10.0) / CHAR_W) as usize))
        ));
        hgt += FAIL_H;
    }
    if refused.len() > MAX_FAILED_ROWS {
        s.push_str(&format!(
            "<text x=\"{x0}\" y=\"{:.1}\" font-size=\"11\" fill=\"{FAILED}\">… and {} more \
             models refused here (see the report)</text>\n",
            y + hgt + 12.0,
            refused.len() - MAX_FAILED_ROWS
        ));
        hgt += 18.0;
    }
    s.push_str("</g>\n");
    (s, hgt + 12.0)
}

/// The line under a refused model's bar: what it needs on the channel against what the
/// channel has, and the verdict.
fn failure_line(p: &Plan, i: usize, needed: u64) -> String {
    let m = &p.models[i];
    let who = format!(
        "✗ {} does not fit: needs {} here",
        model_label(p, i),
        fmt_bytes(needed)
    );
    let Some(r) = &m.refusal else {
        return who;
    };
    match r.verdict {
        Verdict::Full => format!("{who}, {} free: HBM full", fmt_bytes(r.free)),
        Verdict::Fragmented => format!(
            "{who}, {} free but the largest free block is {}: fragmented",
            fmt_bytes(r.free),
            fmt_bytes(r.largest_free_at_align.unwrap_or(r.largest_free))
        ),
        Verdict::Hopeless => format!(
            "{who}, more than the {} an empty channel has free: larger than the channel",
            fmt_bytes(r.empty_free)
        ),
        Verdict::DriverRefused => format!(
            "{who}, {} free: the driver refused a {} request",
            fmt_bytes(r.free),
            fmt_bytes(r.request.size)
        ),
    }
}

/// A stretch of one model's blocks on a channel.
struct Span {
    model: usize,
    start: u64,
    end: u64,
    /// The model's bytes in it.
    bytes: u64,
}

/// The label of a model's stretch in `room` characters: `#3 resnet50 · 102 MiB`, the name
/// cut first; at least its number and bytes (the label may then run past the bracket, and
/// the lane stays taken until it ends).
fn span_label(p: &Plan, i: usize, bytes: u64, room: usize) -> String {
    let (num, b) = (format!("#{i}"), fmt_bytes(bytes));
    let name = p.models.get(i).map_or("", |m| m.name.as_str());
    let fixed = num.chars().count() + b.chars().count() + 4;
    let name = fit(name, room.saturating_sub(fixed));
    if name.is_empty() {
        format!("{num} · {b}")
    } else {
        format!("{num} {name} · {b}")
    }
}

/// The verdict as the JSON writes it.
fn verdict_key(v: Verdict) -> &'static str {
    match v {
        Verdict::Full => "full",
        Verdict::Fragmented => "fragmented",
        Verdict::Hopeless => "hopeless",
        Verdict::DriverRefused => "driver_refused",
    }
}

/// The legend at `y`: each usage's colour, free space, other processes, what a refused model
/// needs. Returns the SVG and its height.
fn legend(p: &Plan, colours: &Colours, y: f64) -> (String, f64) {
    let mut items: Vec<(String, String, &'static str)> = colours
        .usages
        .iter()
        .map(|u| (colours.colour(u).to_string(), u.clone(), "legend"))
        .collect();
    items.push((FREE.into(), "free".into(), "legend free"));
    if p.hbm.iter().flat_map(|h| &h.blocks).any(is_other) {
        items.push((
            "url(#other)".into(),
            "other processes".into(),
            "legend other",
        ));
    }
    if p.models.iter().any(|m| m.refusal.is_some()) {
        items.push((
            "url(#failed)".into(),
            "does not fit: what it needs there".into(),
            "legend failed",
        ));
    }
    const COLS: usize = 4;
    const COL_W: f64 = 295.0;
    let mut s = String::from("<g class=\"legend\">\n");
    for (i, (fill, name, class)) in items.iter().enumerate() {
        let x = 10.0 + (i % COLS) as f64 * COL_W;
        let ly = y + (i / COLS) as f64 * 18.0;
        let stroke = if class.ends_with("failed") {
            FAILED
        } else {
            "#999999"
        };
        s.push_str(&format!(
            "<rect class=\"{class}\" x=\"{x}\" y=\"{ly:.1}\" width=\"14\" height=\"12\" \
             fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"0.5\"/><text x=\"{}\" \
             y=\"{:.1}\">{}</text>\n",
            x + 19.0,
            ly + 10.5,
            xml_escape(name)
        ));
    }
    s.push_str("</g>\n");
    (s, items.len().div_ceil(COLS) as f64 * 18.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sRGB `#rrggbb` to CIELAB (D65).
    fn lab(hex: &str) -> [f64; 3] {
        let c = |i: usize| {
            let v = u8::from_str_radix(&hex[i..i + 2], 16).unwrap() as f64 / 255.0;
            if v <= 0.04045 {
                v / 12.92
            } else {
                ((v + 0.055) / 1.055).powf(2.4)
            }
        };
        let (r, g, b) = (c(1), c(3), c(5));
        let x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
        let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
        let z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
        let f = |t: f64| {
            if t > 0.008856 {
                t.cbrt()
            } else {
                7.787 * t + 16.0 / 116.0
            }
        };
        [
            116.0 * f(y) - 16.0,
            500.0 * (f(x) - f(y)),
            200.0 * (f(y) - f(z)),
        ]
    }

    /// CIE76 colour difference.
    fn delta_e(a: &str, b: &str) -> f64 {
        let (a, b) = (lab(a), lab(b));
        ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
    }

    #[test]
    fn the_palette_has_no_two_colours_alike() {
        let mut min_all = f64::MAX;
        for (i, a) in PALETTE.iter().enumerate() {
            for (j, b) in PALETTE.iter().enumerate().skip(i + 1) {
                let d = delta_e(a, b);
                // The first twelve (a plan rarely shows more usages) stand further apart.
                let floor = if j < 12 { 37.0 } else { 22.0 };
                assert!(d >= floor, "{a} and {b}: ΔE {d:.1} < {floor}");
                min_all = min_all.min(d);
            }
            // Nothing like free space, other processes or a refused model.
            for (what, c, floor) in [
                ("free", FREE, 25.0),
                ("other", OTHER, 25.0),
                ("failed", FAILED, 40.0),
            ] {
                let d = delta_e(a, c);
                assert!(d >= floor, "{a} looks like {what} ({c}): ΔE {d:.1}");
            }
        }
        assert!(min_all >= 22.0);
        // The check has teeth: two teals ΔE 4 apart fail it.
        assert!(delta_e("#76b7b2", "#86bcb6") < 22.0);
    }

    #[test]
    fn the_scale_has_round_steps_in_binary_units() {
        const GIB: u64 = 1 << 30;
        assert_eq!(tick_step(24 * GIB), 4 * GIB);
        assert_eq!(tick_step(16 * GIB), 2 * GIB);
        assert_eq!(tick_step(32 << 20), 4 << 20);
        assert_eq!(tick_step(96 * GIB), 16 * GIB);
        for max in [1u64, 4096, 33 << 20, 24 * GIB, 1 << 44] {
            let s = tick_step(max);
            assert!(max.div_ceil(s) <= 8, "{max}: step {s}");
        }
    }

    #[test]
    fn labels_are_cut_with_an_ellipsis() {
        assert_eq!(fit("#3 resnet50", 20), "#3 resnet50");
        assert_eq!(fit("#3 resnet50", 5), "#3 r…");
        assert_eq!(fit("#3 resnet50", 1), "");
        assert_eq!(fit("", 0), "");
        assert_eq!(ink("#1f78b4"), "#ffffff");
        assert_eq!(ink("#dcd300"), "#000000");
    }
}
