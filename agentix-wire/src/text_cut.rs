//! [`cut_text`]: text cut to a byte limit, at a character boundary, saying
//! how much was cut.
//!
//! What crosses a socket in one message (a log record, an error's message)
//! must fit in it: one of tens of MiB would hold what follows it and the
//! receiver's memory. Such text is cut where it is made, and the cut is
//! said in the text itself, so a reader knows it is not the whole.

use std::fmt::Write as _;

/// Cuts `text` to `max` bytes (at the character boundary at or before it)
/// and appends `… [N bytes cut]`; leaves shorter text as it is.
pub fn cut_text(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    let _ = write!(text, "… [{cut} bytes cut]");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_at_a_character_and_says_so() {
        let mut short = "héllo".to_owned();
        cut_text(&mut short, 64);
        assert_eq!(short, "héllo");
        let mut long = "é".repeat(10);
        cut_text(&mut long, 5);
        assert_eq!(long, "éé… [16 bytes cut]");
    }
}
