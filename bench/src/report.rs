//! The bench's figures: a table for people, one JSON object for programs,
//! and a Markdown table for the book.

/// Figures in the order they were measured.
#[derive(Default)]
pub(crate) struct Report {
    rows: Vec<Row>,
}

struct Row {
    key: String,
    what: String,
    unit: &'static str,
    value: f64,
}

impl Report {
    /// Records `value` under the JSON key `key`.
    pub(crate) fn add(
        &mut self,
        key: impl Into<String>,
        what: impl Into<String>,
        unit: &'static str,
        value: f64,
    ) {
        self.rows.push(Row {
            key: key.into(),
            what: what.into(),
            unit,
            value,
        });
    }

    /// Prints an aligned table on stdout.
    pub(crate) fn print_table(&self) {
        for r in &self.rows {
            println!("{:<32} {:>14.1} {:<8} {}", r.key, r.value, r.unit, r.what);
        }
    }

    /// Every figure as a Markdown table, for the book's benchmarks page.
    pub(crate) fn to_markdown(&self) -> String {
        let mut table = String::from("| figure | key | value |\n|---|---|---|\n");
        for r in &self.rows {
            let value = if r.value.abs() >= 100.0 {
                format!("{:.0}", r.value)
            } else {
                format!("{:.1}", r.value)
            };
            table.push_str(&format!(
                "| {} | `{}` | {value} {} |\n",
                r.what, r.key, r.unit
            ));
        }
        table
    }

    /// Every figure as one JSON object, keys as recorded.
    pub(crate) fn to_json(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                let rounded = (r.value * 10.0).round() / 10.0;
                (r.key.clone(), serde_json::json!(rounded))
            })
            .collect();
        serde_json::Value::Object(map).to_string()
    }
}
