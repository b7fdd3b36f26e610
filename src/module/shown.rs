//! Names from files as printed in reports and errors: control characters escaped, and long
//! names cut, so that what is printed cannot forge a line and stays bounded by its count.

/// How many characters a name (or a line) gets where printing is bounded.
pub(crate) const LINE_CHARS: usize = 240;

/// Characters that reorder or break a line without being control characters: the
/// bidirectional marks and overrides, the line and paragraph separators, zero-width ones.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// A line as printed: names come from files, so control characters (a newline that would
/// forge a line of the report) and invisible ones that reorder a line are escaped, and, `bounded`, a line is cut at
/// [`LINE_CHARS`] characters with the count left out.
pub(crate) fn shown(line: &str, bounded: bool) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for c in line.chars() {
        if bounded && chars == LINE_CHARS {
            let left = line.chars().count() - chars;
            out.push_str(&format!("... (+{left} characters)"));
            break;
        }
        if c.is_control() || invisible(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
        chars += 1;
    }
    out
}
