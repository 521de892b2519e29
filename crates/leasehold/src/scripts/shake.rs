// The prelude's paragraphs each script uses: run by build.rs (`include!`), which writes every
// shipped script's text as a constant, and by the scripts' unit tests (`mod shake`).
//
// Why: Redis runs a script's whole text on every call, and each `local function` of the
// prelude is a closure made, and later collected, on each one. The lock's acquire and release
// used 9 and 6 of its 19 definitions; the whole prelude cost about 5,000 server instructions
// per call (callgrind; docs/BENCHMARKS.md). At build time, so a one-shot process does not pay
// for it either (done at start-up it cost 2.5 million instructions per `leasehold run`).

/// The paragraphs of `prelude` (split at blank lines) that `body` needs:
/// each one defining a name `body` mentions, or that such a paragraph
/// mentions, in the prelude's order; a paragraph with code that defines no
/// name is always kept, one with only comments never.
///
/// A name mentioned only in a comment keeps its paragraph too: more text,
/// never a missing definition.
pub(crate) fn prelude_for(prelude: &str, body: &str) -> String {
    let paragraphs: Vec<&str> = prelude.split("\n\n").collect();
    let defined: Vec<Vec<&str>> = paragraphs.iter().map(|p| definitions(p)).collect();
    let mut wanted = identifiers(body);
    let mut kept = vec![false; paragraphs.len()];
    loop {
        let mut grew = false;
        for (i, paragraph) in paragraphs.iter().enumerate() {
            let has_code = paragraph
                .lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--"));
            let needed = if defined[i].is_empty() {
                has_code
            } else {
                defined[i].iter().any(|name| wanted.contains(name))
            };
            if needed && !kept[i] {
                kept[i] = true;
                wanted.extend(identifiers(paragraph));
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let mut out = String::new();
    for (paragraph, _) in paragraphs.iter().zip(&kept).filter(|(_, k)| **k) {
        out.push_str(paragraph.trim_end_matches('\n'));
        out.push_str("\n\n");
    }
    out
}

/// A script as shipped: the part of `prelude` that `body` uses (see
/// [`prelude_for`]) and `body`, without their comment lines, blank lines
/// and indentation.
///
/// Why: the client hashes each script's text (SHA1, for EVALSHA) the first
/// time a process uses it, and the comments were more than half of it: the
/// lock's acquire and release are 10,600 bytes instead of 24,700, which
/// saves a one-shot `leasehold run` about 330,000 instructions (callgrind,
/// docs/BENCHMARKS.md). Redis compiles a script once, when it is loaded, so
/// comments never cost it a call. A line that holds code keeps all of it,
/// a comment after the code included: only whole comment lines go, so a
/// `--` inside a string is never cut. Long brackets (`[[`, `[=`) would let
/// a comment or string span lines: a script with one is refused here.
pub(crate) fn shipped(prelude: &str, body: &str) -> String {
    let text = format!("{}{body}", prelude_for(prelude, body));
    // A string goes on past a line's end after a backslash, where trimming
    // the next line would change it.
    assert!(
        !text.contains("[[") && !text.contains("[=") && !text.contains("\\\n"),
        "a script uses a long bracket ([[ or [=) or a backslash at a line's end: shake.rs \
         strips comments and indentation line by line"
    );
    let mut out = String::with_capacity(text.len() / 2);
    for line in text.lines().map(str::trim) {
        if !line.is_empty() && !line.starts_with("--") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The names a prelude paragraph defines at its top level: its lines
/// `local NAME = ...` and `local function NAME(...)`.
pub(crate) fn definitions(paragraph: &str) -> Vec<&str> {
    paragraph
        .lines()
        .filter_map(|l| l.strip_prefix("local "))
        .map(|l| l.strip_prefix("function ").unwrap_or(l))
        .filter_map(|l| identifiers_in(l).next())
        .collect()
}

/// Every Lua identifier-like word of `text` (comments and strings too).
pub(crate) fn identifiers(text: &str) -> std::collections::HashSet<&str> {
    identifiers_in(text).collect()
}

/// The identifier-like words of `text`, in order.
fn identifiers_in(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}
