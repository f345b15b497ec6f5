//! The config-file syntax of parameter files: one `name = value` per line,
//! `#` starts a comment, blank lines are ignored (the format of Open MPI's
//! `mca-params.conf`).

use std::fmt;

/// One `name = value` assignment and the 1-based line it stands on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment<'a> {
    /// Parameter name as written, e.g. `btl_tcp_eager_limit`.
    pub name: &'a str,
    /// Value text with surrounding white space removed.
    pub value: &'a str,
    /// Line number, counting from 1.
    pub line: u32,
}

/// A line that is neither blank, a comment nor an assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// Line number, counting from 1.
    pub line: u32,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for SyntaxError {}

/// Splits a parameter file into its assignments, failing on the first line
/// that is not one.
pub fn parse(text: &str) -> Result<Vec<Assignment<'_>>, SyntaxError> {
    let mut out = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = u32::try_from(index + 1).unwrap_or(u32::MAX);
        let content = raw.split_once('#').map_or(raw, |(before, _)| before).trim();
        if content.is_empty() {
            continue;
        }
        let Some((name, value)) = content.split_once('=') else {
            return Err(SyntaxError {
                line,
                reason: "expected `name = value`",
            });
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(SyntaxError {
                line,
                reason: "missing parameter name before `=`",
            });
        }
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(SyntaxError {
                line,
                reason: "a parameter name has only letters, digits and `_`",
            });
        }
        out.push(Assignment {
            name,
            value: value.trim(),
            line,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_comments_and_blank_lines() {
        let text = "# tuning\n\nbtl_tcp_eager_limit = 64k  # bigger\nbtl=tcp,self\n  btl_tcp_if_include =  \n";
        let got = parse(text).expect("parses");
        assert_eq!(
            got,
            vec![
                Assignment {
                    name: "btl_tcp_eager_limit",
                    value: "64k",
                    line: 3
                },
                Assignment {
                    name: "btl",
                    value: "tcp,self",
                    line: 4
                },
                Assignment {
                    name: "btl_tcp_if_include",
                    value: "",
                    line: 5
                },
            ]
        );
    }

    #[test]
    fn a_line_without_equals_is_an_error_with_its_number() {
        let err = parse("btl = self\nnonsense\n").expect_err("fails");
        assert_eq!(err.line, 2);
        assert_eq!(err.to_string(), "line 2: expected `name = value`");
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(parse(" = 3").expect_err("no name").line, 1);
        assert_eq!(parse("btl tcp = 3").expect_err("space").line, 1);
    }

    #[test]
    fn value_may_contain_equals() {
        let got = parse("btl_x = a=b").expect("parses");
        assert_eq!(got[0].value, "a=b");
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_fails_cleanly(text in "\\PC*") {
            let _ = parse(&text);
        }
    }
}
