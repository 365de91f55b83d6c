//! Reading a bundle role's own flags off its command line: `--name value`
//! pairs and bare switches up to `--`, after which comes the command it
//! runs. One reader for every spec the host writes as flags
//! ([`crate::isolation_spec`], [`crate::launch_spec`]), so they report a
//! bad flag alike.

use std::ffi::OsString;

/// One flag as read: its name, and its value unless it is a switch.
pub(crate) struct Flag {
    /// The flag, `--` included.
    pub(crate) name: String,
    /// What followed it; `None` for a switch.
    pub(crate) value: Option<OsString>,
}

impl Flag {
    /// The value (a switch has none; the reader never gives one without).
    pub(crate) fn value(&self) -> OsString {
        self.value.clone().unwrap_or_default()
    }

    /// The value as a number of type `T`, or an error naming the flag.
    pub(crate) fn number<T: std::str::FromStr>(&self) -> Result<T, String> {
        let value = self.value();
        value
            .to_str()
            .and_then(|v| v.parse::<T>().ok())
            .ok_or_else(|| format!("{} needs a number, not {value:?}", self.name))
    }
}

/// Hands each flag before `--` to `each` (the names in `switches` take no
/// value); returns the command line after `--`.
pub(crate) fn read_flags(
    args: impl IntoIterator<Item = OsString>,
    switches: &[&str],
    mut each: impl FnMut(Flag) -> Result<(), String>,
) -> Result<Vec<OsString>, String> {
    let mut args = args.into_iter();
    loop {
        let Some(arg) = args.next() else {
            return Err("no `--` before the command to run".into());
        };
        let name = arg.to_string_lossy().into_owned();
        if name == "--" {
            return Ok(args.collect());
        }
        let value = if switches.contains(&name.as_str()) {
            None
        } else {
            Some(args.next().ok_or_else(|| format!("{name} needs a value"))?)
        };
        each(Flag { name, value })?;
    }
}
