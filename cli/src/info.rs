//! What `btl info` reports: the framework, its components and every
//! parameter with its value, source, level and help, as text (after
//! `ompi_info`) or JSON for tools.

use std::fmt::{self, Write as _};
use std::path::PathBuf;

use btl_core::mca::{ListValue, Param, Params, Source, Version};
use btl_std::ComponentInfo;
use btl_std::bml::{Offer, Outcome};
use serde::{Serialize, Serializer};

/// Level names of ompi_info: who a parameter is for, and how deep it goes.
const LEVEL_NAMES: [&str; 9] = [
    "user/basic",
    "user/detail",
    "user/all",
    "tuner/basic",
    "tuner/detail",
    "tuner/all",
    "dev/basic",
    "dev/detail",
    "dev/all",
];

/// Which parameters to report, as ompi_info's `--param FRAMEWORK COMPONENT
/// --level N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Framework name, or `None` for all.
    pub framework: Option<String>,
    /// Component name, or `None` for all; `""` selects framework-level ones.
    pub component: Option<String>,
    /// Highest level shown, 1..=9.
    pub level: u8,
}

impl Filter {
    fn admits(&self, p: &Param<'_>) -> bool {
        let name = &p.spec.name;
        self.framework
            .as_deref()
            .is_none_or(|f| f == name.framework)
            && self
                .component
                .as_deref()
                .is_none_or(|c| c == name.component)
            && p.spec.level <= self.level
    }
}

/// One parameter as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParamInfo {
    /// Full name, e.g. `btl_tcp_eager_limit`.
    pub name: String,
    /// Environment variable that sets it.
    pub env: String,
    /// Framework part of the name.
    pub framework: String,
    /// Component part of the name (empty for framework-level parameters).
    pub component: String,
    /// Type and bounds.
    pub kind: String,
    /// Current value, in canonical form.
    pub value: String,
    /// Default value as declared.
    pub default: String,
    /// Where the current value came from.
    pub source: String,
    /// Level 1..=9.
    pub level: u8,
    /// What it controls.
    pub help: String,
}

/// Everything `btl info` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Framework name.
    pub framework: String,
    /// Framework interface version.
    pub framework_version: String,
    /// Parameter file that was read, if any.
    pub param_file: Option<PathBuf>,
    /// Components in this build.
    #[serde(serialize_with = "components_json")]
    pub components: Vec<ComponentInfo>,
    /// What the `btl` list makes of each component, best first: what a
    /// service's `ModuleBuilder::open` and `btl pingpong` would open.
    pub selection: Selection,
    /// Parameters that pass the filter.
    pub params: Vec<ParamInfo>,
}

/// The `btl` list and what it makes of each component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Selection {
    /// The list, as read (empty: the default).
    pub list: String,
    /// Each component and what becomes of it, or why the list is refused.
    pub components: Result<Vec<Chosen>, String>,
}

/// One component as the selection treats it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chosen {
    /// The component.
    pub component: String,
    /// Whether it is opened, and why not.
    pub outcome: String,
}

impl Selection {
    /// What `list` makes of the components a `Bml` opens (its own and
    /// those `offers` adds), knowing which of `components` cannot run here.
    pub fn of(list: &ListValue, components: &[ComponentInfo], offers: &[Offer]) -> Self {
        let unavailable = |name: &str| {
            components
                .iter()
                .find(|c| c.name == name)
                .and_then(|c| c.unavailable.clone())
        };
        let chosen = btl_std::bml::choose(list, offers).map(|choices| {
            choices
                .into_iter()
                .map(|c| {
                    let outcome = match (&c.outcome, unavailable(&c.component)) {
                        (Outcome::Selected { .. }, Some(why)) => {
                            format!("selected, but cannot run here ({why}): left out unless named")
                        }
                        (outcome, _) => outcome.to_string(),
                    };
                    Chosen {
                        component: c.component,
                        outcome,
                    }
                })
                .collect()
        });
        Selection {
            list: list.to_string(),
            components: chosen,
        }
    }
}

impl Report {
    /// Gathers the report from the registry, keeping the parameters the
    /// filter admits, in registration order.
    pub fn gather(
        framework: &str,
        framework_version: Version,
        components: Vec<ComponentInfo>,
        selection: Selection,
        params: &dyn Params,
        param_file: Option<PathBuf>,
        filter: &Filter,
    ) -> Self {
        let file = param_file.as_deref().map(|p| p.display().to_string());
        let params = params
            .iter()
            .filter(|p| filter.admits(p))
            .map(|p| ParamInfo {
                name: p.spec.name.to_string(),
                env: p.spec.name.env().to_string(),
                framework: p.spec.name.framework.to_owned(),
                component: p.spec.name.component.to_owned(),
                kind: kind_text(&p),
                value: p.value.to_string(),
                default: p.spec.default.to_owned(),
                source: source_text(p.source, file.as_deref(), &p),
                level: p.spec.level,
                help: p.spec.help.to_owned(),
            })
            .collect();
        Report {
            framework: framework.to_owned(),
            framework_version: framework_version.to_string(),
            param_file,
            components,
            selection,
            params,
        }
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // A tree of strings and numbers always serialises.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Framework: {} (interface v{})",
            self.framework, self.framework_version
        )?;
        match &self.param_file {
            Some(path) => writeln!(f, "Parameter file: {}", path.display())?,
            None => writeln!(f, "Parameter file: none")?,
        }
        if self.components.is_empty() {
            writeln!(f, "Components: none in this build")?;
        }
        for c in &self.components {
            write!(
                f,
                "MCA {}: {} (v{}, interface v{})",
                c.framework, c.name, c.version, c.framework_version
            )?;
            match &c.unavailable {
                Some(why) => writeln!(f, ": not available: {why}")?,
                None => writeln!(f)?,
            }
        }
        let list = match self.selection.list.as_str() {
            "" => "(empty: the default)",
            list => list,
        };
        writeln!(f, "Selection: btl = {list}")?;
        match &self.selection.components {
            Ok(chosen) => {
                for c in chosen {
                    writeln!(f, "  {}: {}", c.component, c.outcome)?;
                }
            }
            Err(why) => writeln!(f, "  refused: {why}")?,
        }
        if self.params.is_empty() {
            writeln!(f, "No parameters at this level (try --level 9).")?;
        }
        for p in &self.params {
            let scope = if p.component.is_empty() {
                p.framework.clone()
            } else {
                format!("{} {}", p.framework, p.component)
            };
            let level = LEVEL_NAMES
                .get(usize::from(p.level).wrapping_sub(1))
                .copied()
                .unwrap_or("?");
            writeln!(
                f,
                "MCA {scope}: parameter \"{}\" (current value: \"{}\", data source: {}, level: {} {level}, type: {})",
                p.name, p.value, p.source, p.level, p.kind
            )?;
            let mut help = String::new();
            for line in p.help.lines() {
                let _ = writeln!(help, "          {line}");
            }
            f.write_str(&help)?;
            writeln!(f, "          Environment: {}", p.env)?;
        }
        Ok(())
    }
}

/// The components as JSON objects, one field each. `ComponentInfo` is
/// the library's plain listing, with no serialisation of its own.
fn components_json<S: Serializer>(components: &[ComponentInfo], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Json<'a> {
        framework: &'a str,
        name: &'a str,
        version: &'a str,
        framework_version: &'a str,
        available: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        unavailable: Option<&'a str>,
    }
    s.collect_seq(components.iter().map(|c| Json {
        framework: &c.framework,
        name: &c.name,
        version: &c.version,
        framework_version: &c.framework_version,
        available: c.unavailable.is_none(),
        unavailable: c.unavailable.as_deref(),
    }))
}

fn kind_text(p: &Param<'_>) -> String {
    use btl_core::mca::{DisplaySize, ParamKind};
    match p.spec.kind {
        ParamKind::Int { min, max } => format!("int {min}..={max}"),
        ParamKind::Size { min, max } => format!("size {}..={}", DisplaySize(min), DisplaySize(max)),
        ParamKind::Flags { names } => format!("flags {}", names.join(",")),
        ref other => other.to_string(),
    }
}

fn source_text(source: Source, file: Option<&str>, p: &Param<'_>) -> String {
    match (source, file) {
        (Source::ConfigFile { line }, Some(file)) => format!("file {file}:{line}"),
        (Source::Environment, _) => format!("environment {}", p.spec.name.env()),
        (other, _) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use btl_core::mca::{
        BTL_FRAMEWORK, BTL_FRAMEWORK_VERSION, Component, Modules, NotAvailable, ParamKind,
        ParamSpec, RegisterError, Registry, register_framework_params,
    };

    static EAGER: ParamSpec = ParamSpec::new("btl", "demo", "eager_limit", ParamKind::SIZE, "4k")
        .help("Largest message sent eagerly")
        .level(4);
    static FLAGS: ParamSpec = ParamSpec::new(
        "btl",
        "demo",
        "flags",
        ParamKind::Flags {
            names: &["send", "put", "get", "inplace"],
        },
        "send,put",
    )
    .help("What the component offers")
    .level(9);

    /// A component with two parameters, to show how `btl info` lists one.
    struct Demo;

    impl Component for Demo {
        type Module = ();
        fn framework(&self) -> &'static str {
            BTL_FRAMEWORK
        }
        fn name(&self) -> &'static str {
            "demo"
        }
        fn version(&self) -> Version {
            Version::new(0, 3, 1)
        }
        fn framework_version(&self) -> Version {
            BTL_FRAMEWORK_VERSION
        }
        fn register(&mut self, params: &mut dyn Params) -> Result<(), RegisterError> {
            params.register(&EAGER)?;
            params.register(&FLAGS)?;
            Ok(())
        }
        fn init(&mut self, _: &dyn Params) -> Result<Modules<()>, NotAvailable> {
            Err(NotAvailable::new("demo component has no modules"))
        }
    }

    fn report(filter: &Filter) -> Report {
        let mut reg = Registry::<8>::new();
        register_framework_params(&mut reg).expect("framework");
        let mut demo = Demo;
        demo.register(&mut reg).expect("demo");
        let id = reg.find("btl_demo_eager_limit").expect("registered");
        reg.set(id, "8k", Source::ConfigFile { line: 7 })
            .expect("set");
        let components = vec![ComponentInfo::of(&demo)];
        let selection = Selection::of(&ListValue::default(), &components, &[]);
        Report::gather(
            BTL_FRAMEWORK,
            BTL_FRAMEWORK_VERSION,
            components,
            selection,
            &reg,
            Some(PathBuf::from("site.conf")),
            filter,
        )
    }

    fn all() -> Filter {
        Filter {
            framework: None,
            component: None,
            level: 9,
        }
    }

    #[test]
    fn text_lists_components_and_parameters() {
        let text = report(&all()).to_string();
        assert!(
            text.contains("MCA btl: demo (v0.3.1, interface v1.0.0)"),
            "{text}"
        );
        assert!(
            text.contains(
                "MCA btl demo: parameter \"btl_demo_eager_limit\" (current value: \"8k\", data source: file site.conf:7, level: 4 tuner/basic, type: size 0..="
            ),
            "{text}"
        );
        assert!(text.contains("Environment: BTL_DEMO_EAGER_LIMIT"), "{text}");
        assert!(text.contains("Largest message sent eagerly"), "{text}");
        assert!(text.contains("type: flags send,put,get,inplace"), "{text}");
    }

    #[test]
    fn filter_by_component_and_level() {
        let r = report(&Filter {
            framework: Some("btl".into()),
            component: Some("demo".into()),
            level: 4,
        });
        let names: Vec<_> = r.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["btl_demo_eager_limit"]);

        let r = report(&Filter {
            framework: Some("btl".into()),
            component: Some(String::new()),
            level: 9,
        });
        let names: Vec<_> = r.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["btl"]);

        let r = report(&Filter { level: 1, ..all() });
        assert!(r.params.is_empty());
        assert!(r.to_string().contains("No parameters at this level"));
    }

    #[test]
    fn json_carries_every_field() {
        let json: serde_json::Value =
            serde_json::from_str(&report(&all()).to_json()).expect("valid JSON");
        assert_eq!(json["framework_version"], "1.0.0");
        assert_eq!(json["components"][0]["name"], "demo");
        let eager = json["params"]
            .as_array()
            .expect("array")
            .iter()
            .find(|p| p["name"] == "btl_demo_eager_limit")
            .expect("listed");
        assert_eq!(eager["value"], "8k");
        assert_eq!(eager["default"], "4k");
        assert_eq!(eager["source"], "file site.conf:7");
        assert_eq!(eager["env"], "BTL_DEMO_EAGER_LIMIT");
        assert_eq!(eager["level"], 4);
    }
}
