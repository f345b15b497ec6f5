//! The environment and config-file sources of parameters, which `btl-core`
//! cannot read itself: `BTL_TCP_EAGER_LIMIT=64k` in the environment, and
//! `btl_tcp_eager_limit = 64k` in a parameter file.
//!
//! Precedence is the registry's (default < config file < environment <
//! code), so the order in which the sources are loaded does not matter.

use std::fmt;
use std::path::{Path, PathBuf};

use btl_core::mca::{Params, SetError, Source};

use super::param_file::{self, SyntaxError};

/// Environment variable naming the parameter file to read.
pub const PARAM_FILE_VAR: &str = "BTL_PARAM_FILE";

/// Why a parameter source could not be applied.
#[derive(Debug)]
pub enum SourceError {
    /// The parameter file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// A line of the parameter file is not `name = value`.
    Syntax {
        /// The file.
        path: PathBuf,
        /// The line and what is wrong with it.
        error: SyntaxError,
    },
    /// A value in the parameter file is invalid for its parameter.
    FileValue {
        /// The file.
        path: PathBuf,
        /// The parameter, value, line and problem.
        error: Box<SetError>,
    },
    /// An environment variable holds a value invalid for its parameter.
    EnvironmentValue(Box<SetError>),
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::Read { path, error } => {
                write!(f, "cannot read parameter file {}: {error}", path.display())
            }
            SourceError::Syntax { path, error } => {
                write!(f, "parameter file {}: {error}", path.display())
            }
            SourceError::FileValue { path, error } => {
                write!(f, "parameter file {}: {error}", path.display())
            }
            SourceError::EnvironmentValue(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for SourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SourceError::Read { error, .. } => Some(error),
            SourceError::Syntax { error, .. } => Some(error),
            SourceError::FileValue { error, .. } | SourceError::EnvironmentValue(error) => {
                Some(error.as_ref())
            }
        }
    }
}

/// A name in a parameter file that no registered parameter has: most often a
/// typo, or a component missing from this build. Reported, not fatal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// The name as written.
    pub name: String,
    /// Its line in the file.
    pub line: u32,
}

/// Sets every registered parameter whose environment variable
/// (`BTL_TCP_EAGER_LIMIT` for `btl_tcp_eager_limit`) `lookup` finds.
///
/// `lookup` is `|var| std::env::var(var).ok()` in a program; tests pass a map.
pub fn apply_environment(
    params: &mut dyn Params,
    mut lookup: impl FnMut(&str) -> Option<String>,
) -> Result<(), SourceError> {
    let found: Vec<_> = params
        .iter()
        .filter_map(|p| lookup(&p.spec.name.env().to_string()).map(|value| (p.id, value)))
        .collect();
    for (id, value) in found {
        params
            .set(id, &value, Source::Environment)
            .map_err(|e| SourceError::EnvironmentValue(Box::new(e)))?;
    }
    Ok(())
}

/// Environment variables of btl that are not parameters: the job's key,
/// name and rank, the parameter file, the peer list, the log filter.
pub const OTHER_VARIABLES: [&str; 7] = [
    "BTL_JOB_KEY",
    "BTL_JOB",
    "BTL_RANK",
    PARAM_FILE_VAR,
    "BTL_PEERS",
    "BTL_PEERS_FILE",
    "BTL_LOG",
];

/// What is wrong with the btl variables among `vars` (name and value), as
/// sentences to warn with: a `BTL_*` name that is no parameter of this
/// build (`params` holds every component's, as [`register_all`] makes
/// them) nor one of [`OTHER_VARIABLES`], with the parameter it most likely
/// meant; and names in the selection list `BTL` that no component of
/// `components` has. Each such setting is otherwise ignored, which is why
/// it is said.
///
/// [`register_all`]: crate::register_all
pub fn environment_mistakes(
    params: &dyn Params,
    components: &[&str],
    vars: impl IntoIterator<Item = (String, String)>,
) -> Vec<String> {
    let known: Vec<String> = params
        .iter()
        .map(|p| p.spec.name.env().to_string())
        .collect();
    let mut said = Vec::new();
    for (name, value) in vars {
        if name == "BTL" {
            let unknown: Vec<&str> = value
                .trim_start_matches('^')
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty() && !components.contains(c))
                .collect();
            if !unknown.is_empty() {
                said.push(format!(
                    "BTL={value}: no component {} in this build (it has {}); the name is ignored",
                    unknown.join(", "),
                    components.join(", ")
                ));
            }
            continue;
        }
        if !name.starts_with("BTL_")
            || known.contains(&name)
            || OTHER_VARIABLES.contains(&name.as_str())
        {
            continue;
        }
        let guess = known
            .iter()
            .map(String::as_str)
            .chain(OTHER_VARIABLES)
            .map(|k| (edit_distance(&name, k), k))
            .min()
            .filter(|(d, _)| *d <= 3)
            .map(|(_, k)| format!(" (did you mean {k}?)"))
            .unwrap_or_default();
        said.push(format!(
            "{name} is set but is no parameter of this build{guess}: it is ignored"
        ));
    }
    said.sort();
    said
}

/// Warns, once per process, of what [`environment_mistakes`] finds in this
/// process's environment among every component of btl-std: a module
/// opened with the environment's parameters calls it, so that a misspelt
/// variable is said where it would otherwise be ignored. A program with
/// components of its own says them itself ([`claim_environment_mistakes`]).
pub fn warn_environment_mistakes() {
    if !claim_environment_mistakes() {
        return;
    }
    let mut params = Box::new(crate::ParamRegistry::new());
    let Ok(components) = crate::register_all(params.as_mut()) else {
        return;
    };
    let names: Vec<&str> = components.iter().map(|c| c.name.as_str()).collect();
    for mistake in environment_mistakes(params.as_ref(), &names, std::env::vars()) {
        tracing::warn!("{mistake}");
    }
}

/// Whether this call is the first to take on saying the environment's
/// mistakes in this process: true once, after which
/// [`warn_environment_mistakes`] says nothing. A program that registers
/// components of its own (the `btl` command's verbs) calls it, and says
/// [`environment_mistakes`] over all its parameters itself.
pub fn claim_environment_mistakes() -> bool {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    !SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
}

/// How many one-character insertions, deletions and substitutions turn `a`
/// into `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Applies the assignments of the parameter file at `path`; returns the
/// names it has that no parameter is registered under.
pub fn apply_file(params: &mut dyn Params, path: &Path) -> Result<Vec<UnknownName>, SourceError> {
    let text = std::fs::read_to_string(path).map_err(|error| SourceError::Read {
        path: path.to_owned(),
        error,
    })?;
    let assignments = param_file::parse(&text).map_err(|error| SourceError::Syntax {
        path: path.to_owned(),
        error,
    })?;
    let mut unknown = Vec::new();
    for a in assignments {
        let Some(id) = params.find(a.name) else {
            unknown.push(UnknownName {
                name: a.name.to_owned(),
                line: a.line,
            });
            continue;
        };
        params
            .set(id, a.value, Source::ConfigFile { line: a.line })
            .map_err(|error| SourceError::FileValue {
                path: path.to_owned(),
                error: Box::new(error),
            })?;
    }
    Ok(unknown)
}

/// The parameter file to read when none is given on the command line:
/// `$BTL_PARAM_FILE` if set, else `btl/params.conf` under the user's config
/// directory (`$XDG_CONFIG_HOME`, or `$HOME/.config`) if that file exists.
pub fn default_param_file(lookup: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(file) = lookup(PARAM_FILE_VAR).filter(|f| !f.is_empty()) {
        return Some(PathBuf::from(file));
    }
    let config_dir = lookup("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| lookup("HOME").map(|h| Path::new(&h).join(".config")))?;
    let file = config_dir.join("btl").join("params.conf");
    file.is_file().then_some(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use btl_core::mca::{ParamKind, ParamSpec, Registry};
    use std::collections::HashMap;

    static EAGER: ParamSpec =
        ParamSpec::new("btl", "tcp", "eager_limit", ParamKind::SIZE, "64k").help("eager limit");
    static SELECTION: ParamSpec =
        ParamSpec::new("btl", "", "", ParamKind::List, "").help("components to use");

    fn registry() -> Registry<4> {
        let mut r = Registry::new();
        r.register(&EAGER).expect("eager");
        r.register(&SELECTION).expect("selection");
        r
    }

    fn env(pairs: &[(&str, &str)]) -> impl FnMut(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn temp_file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("btl-param-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn environment_sets_registered_parameters() {
        let mut r = registry();
        apply_environment(
            &mut r,
            env(&[("BTL_TCP_EAGER_LIMIT", "1M"), ("BTL", "self")]),
        )
        .expect("applies");
        let id = r.find("btl_tcp_eager_limit").expect("registered");
        assert_eq!(r.size(id).expect("size"), 1 << 20);
        assert_eq!(r.param(id).expect("param").source, Source::Environment);
        let sel = r.find("btl").expect("registered");
        assert_eq!(r.list(sel).expect("list").as_str(), "self");
    }

    #[test]
    fn a_bad_environment_value_names_the_variable() {
        let mut r = registry();
        let err = apply_environment(&mut r, env(&[("BTL_TCP_EAGER_LIMIT", "lots")]))
            .expect_err("invalid");
        let text = err.to_string();
        assert!(text.contains("BTL_TCP_EAGER_LIMIT"), "{text}");
        assert!(text.contains("lots"), "{text}");
    }

    #[test]
    fn file_values_apply_below_the_environment() {
        let path = temp_file("precedence.conf", "btl_tcp_eager_limit = 128k\nbtl = tcp\n");
        let mut r = registry();
        apply_environment(&mut r, env(&[("BTL", "self")])).expect("env");
        let unknown = apply_file(&mut r, &path).expect("file");
        assert!(unknown.is_empty());
        let eager = r.find("btl_tcp_eager_limit").expect("registered");
        assert_eq!(r.size(eager).expect("size"), 128 << 10);
        assert_eq!(
            r.param(eager).expect("param").source,
            Source::ConfigFile { line: 1 }
        );
        let sel = r.find("btl").expect("registered");
        assert_eq!(
            r.list(sel).expect("list").as_str(),
            "self",
            "environment wins"
        );
    }

    #[test]
    fn unknown_file_names_are_reported_not_fatal() {
        let path = temp_file("unknown.conf", "# c\nbtl_tcp_eager_limt = 1k\n");
        let mut r = registry();
        let unknown = apply_file(&mut r, &path).expect("file");
        assert_eq!(
            unknown,
            vec![UnknownName {
                name: "btl_tcp_eager_limt".into(),
                line: 2
            }]
        );
    }

    #[test]
    fn file_errors_name_the_file_and_line() {
        let path = temp_file("bad.conf", "btl = self\nbtl_tcp_eager_limit = -3\n");
        let mut r = registry();
        let text = apply_file(&mut r, &path).expect_err("invalid").to_string();
        assert!(text.contains("bad.conf"), "{text}");
        assert!(text.contains("line 2"), "{text}");
        assert!(text.contains("-3"), "{text}");

        let path = temp_file("syntax.conf", "btl self\n");
        let text = apply_file(&mut r, &path).expect_err("syntax").to_string();
        assert!(text.contains("syntax.conf: line 1"), "{text}");

        let missing = temp_file("x", "").with_file_name("does-not-exist.conf");
        let text = apply_file(&mut r, &missing)
            .expect_err("missing")
            .to_string();
        assert!(text.contains("cannot read parameter file"), "{text}");
    }

    #[test]
    fn default_file_comes_from_the_variable_or_the_config_dir() {
        let lookup = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            default_param_file(lookup(&[("BTL_PARAM_FILE", "/etc/btl.conf")])),
            Some(PathBuf::from("/etc/btl.conf"))
        );
        assert_eq!(
            default_param_file(lookup(&[("HOME", "/nonexistent-home")])),
            None
        );

        let conf = temp_file("params.conf", "btl = self\n");
        let btl_dir = conf.parent().expect("dir").join("btl");
        std::fs::create_dir_all(&btl_dir).expect("dir");
        std::fs::copy(&conf, btl_dir.join("params.conf")).expect("copy");
        let xdg = conf.parent().expect("dir").to_string_lossy().into_owned();
        let found = default_param_file(|k| (k == "XDG_CONFIG_HOME").then(|| xdg.clone()));
        assert_eq!(found, Some(btl_dir.join("params.conf")));
    }

    #[test]
    fn misspelt_variables_and_unknown_components_are_said() {
        let mut r = Box::new(crate::ParamRegistry::new());
        crate::register_all(r.as_mut()).expect("every component registers");
        let vars = [
            ("BTL_TCP_EAGER_LIMT", "1M"),
            ("BTL_TCP_EAGER_LIMIT", "1M"),
            ("BTL_JOB_KEY", "k"),
            ("BTL", "tcp,bogus"),
            ("PATH", "/bin"),
            ("BTL_NOTHING_LIKE_IT_AT_ALL", "1"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()));
        let said = environment_mistakes(r.as_ref(), &["self", "tcp", "udp"], vars);
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(
            said[0].starts_with("BTL=tcp,bogus: no component bogus"),
            "{said:?}"
        );
        assert!(
            said[1].contains("BTL_NOTHING_LIKE_IT_AT_ALL is set") && !said[1].contains("mean"),
            "{said:?}"
        );
        assert!(
            said[2].contains("BTL_TCP_EAGER_LIMT")
                && said[2].contains("did you mean BTL_TCP_EAGER_LIMIT?"),
            "{said:?}"
        );
        let fine =
            [("BTL", "^udp"), ("BTL_UDP_MTU", "1472")].map(|(n, v)| (n.to_owned(), v.to_owned()));
        assert!(environment_mistakes(r.as_ref(), &["self", "tcp", "udp"], fine).is_empty());
    }
}
