//! Secret settings: [`Secret`] (never shown by `Debug`) and the
//! `--…-file` flags that read a setting from a mounted file ([`FromFile`],
//! [`FileParser`]).
//!
//! Invariant: neither a secret nor a file's content is ever quoted, in
//! `Debug`, `Serialize` (a file flag serializes as its path) or an error.

/// A secret setting: its `Debug` never shows it (settings are logged);
/// [`Secret::expose`] is the one way to read it.
#[derive(Clone, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_string()))
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl Secret {
    /// The secret a pair of flags gives: the `--…-file` form's content, or
    /// the value (clap refuses both at once); `None` when neither is given
    /// or the value is empty.
    pub fn given(value: Option<&Secret>, file: Option<&FromFile<Secret>>) -> Option<Secret> {
        file.map(FromFile::value)
            .or(value)
            .filter(|s| !s.expose().is_empty())
            .cloned()
    }
}

/// A setting read from a file (`--store-file`, `--…-secret-file`,
/// `--user-hash-key-file`): where a secret is mounted (a Kubernetes or
/// Cloud Run secret volume, the Secret Manager CSI driver), so it is never
/// on a command line or in a manifest.
///
/// Invariant: `value` is what the file held when the flags were parsed,
/// trailing line breaks removed, never empty; `Debug` and `Serialize` show
/// the path only (so [`RunArgs::to_flags`] hands a child the path of a
/// webhook secret or hash key, not the secret).
#[derive(Clone, PartialEq, Eq)]
pub struct FromFile<T> {
    path: std::path::PathBuf,
    value: T,
}

impl<T> FromFile<T> {
    /// The file it was read from.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// What the file held.
    pub fn value(&self) -> &T {
        &self.value
    }
}

impl<T> std::fmt::Debug for FromFile<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FromFile({:?})", self.path)
    }
}

impl<T> serde::Serialize for FromFile<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.path.to_string_lossy())
    }
}

/// Reads a secret's file: its text without trailing line breaks (`echo`
/// and most editors add one). A file that is missing, unreadable, not
/// UTF-8 or empty is an error naming the path, never quoting the content.
pub fn read_secret_file(path: &std::path::Path) -> Result<String, String> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
    let text = text.trim_end_matches(['\n', '\r']);
    if text.is_empty() {
        return Err(format!("{shown} is empty"));
    }
    Ok(text.to_string())
}

/// Parses a `--…-file` flag for clap: reads the file the value names and
/// parses its content as `T`. Errors name the flag and the path; neither
/// they nor `T`'s own errors quote the content (`T`'s `FromStr` must not
/// quote its input: [`StoreLocation`]'s does not, [`Secret`]'s cannot fail).
pub struct FileParser<T>(std::marker::PhantomData<fn() -> T>);

impl<T> FileParser<T> {
    /// A parser of files holding a `T`.
    pub fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T> Default for FileParser<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for FileParser<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T> clap::builder::TypedValueParser for FileParser<T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: std::fmt::Display,
{
    type Value = FromFile<T>;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<FromFile<T>, clap::Error> {
        let flag = arg
            .and_then(clap::Arg::get_long)
            .map_or_else(|| "a file flag".to_string(), |long| format!("--{long}"));
        let refuse = |reason: String| {
            let message = format!("invalid value for '{flag}': {reason}\n");
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message).with_cmd(cmd)
        };
        let path = std::path::PathBuf::from(value);
        let text = read_secret_file(&path).map_err(refuse)?;
        let parsed = text.parse::<T>().map_err(|e| {
            refuse(format!(
                "what {} holds (not shown: it may hold a password): {e}",
                path.display()
            ))
        })?;
        Ok(FromFile {
            path,
            value: parsed,
        })
    }
}
