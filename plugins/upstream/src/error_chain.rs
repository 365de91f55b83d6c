//! [`causes`]: an error and its sources as one line.

/// An error and its causes, as one line: a client's own error says little
/// ("client error (Connect)"), its sources say why.
pub fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
