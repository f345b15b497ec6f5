//! `btl info` as a user runs it: the real binary, its exit status and output.

use std::process::{Command, Output};

fn btl(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_btl"));
    cmd.args(args)
        .env_remove("BTL")
        .env_remove("BTL_PARAM_FILE")
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("btl-cli-test-no-config"),
        );
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("btl runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn info_lists_the_framework_and_its_parameters() {
    let out = btl(&["info", "--level", "9"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Framework: btl (interface v1.0.0)"), "{text}");
    assert!(text.contains("parameter \"btl\""), "{text}");
    assert!(text.contains("data source: default"), "{text}");
    assert!(
        text.contains("MCA btl: self (v0.1.0, interface v1.0.0)"),
        "{text}"
    );
    assert!(
        text.contains("parameter \"btl_self_eager_limit\""),
        "{text}"
    );
    // Shared memory is listed, available here (Linux with /dev/shm), with
    // its parameters.
    assert!(
        text.contains("MCA btl: sm (v0.1.0, interface v1.0.0)\n"),
        "{text}"
    );
    for param in [
        "btl_sm_fifo_size",
        "btl_sm_single_copy_limit",
        "btl_sm_eager_limit",
    ] {
        assert!(
            text.contains(&format!("parameter \"{param}\"")),
            "{param}: {text}"
        );
    }
}

#[test]
fn environment_values_show_their_source() {
    let out = btl(&["info", "--level", "9"], &[("BTL", "^tcp")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("current value: \"^tcp\", data source: environment BTL"),
        "{text}"
    );
}

#[test]
fn an_invalid_value_exits_2_and_names_it() {
    let out = btl(&["info"], &[("BTL", "tcp,^self")]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("BTL") && err.contains("tcp,^self"), "{err}");
}

#[test]
fn a_parameter_file_applies_below_the_environment_and_warns_on_unknown_names() {
    let dir = std::env::temp_dir().join(format!("btl-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("params.conf");
    std::fs::write(&file, "btl = self\nbtl_nonesuch = 1\n").expect("write");
    let path = file.to_str().expect("utf-8 path");

    let out = btl(&["info", "--level", "9", "--param-file", path], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("current value: \"self\", data source: file"));
    assert!(stderr(&out).contains("no parameter `btl_nonesuch`"));

    let out = btl(
        &["info", "--level", "9"],
        &[("BTL_PARAM_FILE", path), ("BTL", "tcp")],
    );
    assert!(stdout(&out).contains("current value: \"tcp\", data source: environment"));
}

#[test]
fn json_is_valid_and_filters_apply() {
    let out = btl(
        &["info", "--json", "--param", "btl", "all", "--level", "9"],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["framework"], "btl");
    assert_eq!(json["params"][0]["name"], "btl");

    let out = btl(
        &["info", "--json", "--param", "btl", "tcp", "--level", "9"],
        &[],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let names: Vec<&str> = json["params"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(names.contains(&"btl_tcp_if_include"), "{names:?}");
    assert!(names.contains(&"btl_tcp_peer_timeout"), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("btl_tcp_")), "{names:?}");
}

#[test]
fn a_level_out_of_range_is_refused() {
    let out = btl(&["info", "--level", "10"], &[]);
    assert!(!out.status.success());
}

/// The verbs component is listed whether or not it can run; where it
/// cannot (a build without RDMA support, a machine without a device), the
/// listing says why, and the rest of `btl info` is unchanged.
#[test]
fn info_says_why_verbs_cannot_run() {
    let out = btl(&["info"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("MCA btl: verbs (v0.1.0, interface v1.0.0)"))
        .unwrap_or_else(|| panic!("verbs is listed: {text}"));
    if let Some(why) = line.split_once(": not available: ").map(|(_, why)| why) {
        assert!(!why.trim().is_empty(), "a reason: {line}");
    }
    assert!(
        text.contains("MCA btl: tcp (v0.1.0, interface v1.0.0)\n"),
        "{text}"
    );

    let out = btl(&["info", "--json"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let verbs = json["components"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "verbs"))
        .expect("verbs in the JSON");
    let available = verbs["available"].as_bool().expect("a boolean");
    assert_eq!(available, verbs.get("unavailable").is_none(), "{verbs}");
    let tcp = json["components"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "tcp"))
        .expect("tcp in the JSON");
    assert_eq!(tcp["available"], true);

    let out = btl(
        &["info", "--level", "9"],
        &[("BTL_VERBS_IB_RNR_RETRY", "3")],
    );
    assert!(
        stdout(&out).contains("parameter \"btl_verbs_ib_rnr_retry\" (current value: \"3\""),
        "{}",
        stdout(&out)
    );
}

/// `btl pingpong --btl verbs` on a machine where verbs cannot run fails
/// at once, with the reason `btl info` gives (and starts no peer that
/// would fail too); where it can, it measures.
#[test]
fn pingpong_over_verbs_runs_or_says_why_not() {
    let info = stdout(&btl(&["info"], &[]));
    let why = info
        .lines()
        .find(|l| l.starts_with("MCA btl: verbs "))
        .and_then(|l| l.split_once(": not available: "))
        .map(|(_, why)| why.trim().to_owned());
    let out = btl(
        &[
            "pingpong",
            "--btl",
            "verbs",
            "--max-size",
            "64",
            "--iters",
            "100",
        ],
        &[],
    );
    match why {
        Some(why) => {
            assert!(!out.status.success());
            let err = stderr(&out);
            assert_eq!(err.matches("verbs:").count(), 1, "said once: {err}");
            let first = why.split(" (").next().unwrap_or(&why);
            assert!(err.contains(first), "{err} / {why}");
        }
        None => assert!(out.status.success(), "{}", stderr(&out)),
    }
}

/// A `BTL_*` variable that names no parameter (a typo) and a component in
/// `BTL` that this build lacks are said once on stderr, with the likely
/// intent; a parameter of the verbs component is known.
#[test]
fn misspelt_variables_and_unknown_components_are_said_once() {
    let out = btl(
        &["info"],
        &[
            ("BTL_TCP_EAGER_LIMT", "1M"),
            ("BTL", "tcp,bogus"),
            ("BTL_VERBS_DEVICE", "mlx5_0"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let typo = "BTL_TCP_EAGER_LIMT is set but is no parameter of this build (did you mean BTL_TCP_EAGER_LIMIT?)";
    assert_eq!(err.matches(typo).count(), 1, "{err}");
    assert_eq!(err.matches("no component bogus").count(), 1, "{err}");
    assert!(!err.contains("BTL_VERBS_DEVICE"), "{err}");
}

#[test]
fn a_udp_size_the_datagram_caps_is_said_once_per_module() {
    let args = [
        "pingpong",
        "--btl",
        "udp",
        "--min-size",
        "1",
        "--max-size",
        "1",
    ];
    let chosen = btl(
        &args,
        &[("BTL_LOG", "warn"), ("BTL_UDP_MAX_SEND_SIZE", "1M")],
    );
    assert!(chosen.status.success(), "{}", stderr(&chosen));
    let err = stderr(&chosen);
    let capped = "btl_udp_max_send_size = 1048576 is capped at ";
    assert_eq!(err.matches(capped).count(), 2, "one per process: {err}");
    assert!(err.contains("move more with a put"), "{err}");
    // The defaults are capped too (64 KiB over loopback's datagrams), but
    // nobody chose them: nothing to say.
    let defaults = btl(&args, &[("BTL_LOG", "warn")]);
    assert!(defaults.status.success(), "{}", stderr(&defaults));
    assert!(
        !stderr(&defaults).contains("capped"),
        "{}",
        stderr(&defaults)
    );
}

/// `btl info` says what the `btl` list selects, best first, and why each
/// other component is not used: left out by the list, used only when
/// named, or run alone; a list that names no component is refused there.
#[test]
fn info_shows_what_the_btl_list_selects_and_why_not_the_others() {
    let section = |env: &[(&str, &str)]| {
        let out = btl(&["info"], env);
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        let lines: Vec<String> = text
            .lines()
            .skip_while(|l| !l.starts_with("Selection: "))
            .take_while(|l| l.starts_with("Selection: ") || l.starts_with("  "))
            .map(str::to_owned)
            .collect();
        lines
    };
    let by_default = section(&[]);
    assert_eq!(by_default[0], "Selection: btl = (empty: the default)");
    let firsts: Vec<&str> = by_default[1..5].iter().map(|l| l.trim()).collect();
    assert!(firsts[0].starts_with("self: selected"), "{by_default:?}");
    assert!(firsts[1].starts_with("sm: selected"), "{by_default:?}");
    // Verbs ranks above the networks: selected where it runs, else said
    // why not (no HCA, or a build without RDMA support).
    assert!(
        firsts[2].starts_with("verbs: selected"),
        "verbs by its exclusivity: {by_default:?}"
    );
    assert!(firsts[3].starts_with("tcp: selected"), "{by_default:?}");
    assert!(
        by_default
            .iter()
            .any(|l| l.trim() == "udp: not named in btl (used only when named)"),
        "{by_default:?}"
    );
    let without = section(&[("BTL", "^sm")]);
    assert!(
        without
            .iter()
            .any(|l| l.trim() == "sm: left out by btl=^sm"),
        "{without:?}"
    );
    assert!(
        without
            .iter()
            .any(|l| l.trim().starts_with("udp: selected")),
        "{without:?}"
    );
    let bad = section(&[("BTL", "tcp,shmem")]);
    assert!(
        bad[1].contains("refused: no component shmem") && bad[1].contains("self, sm, tcp, udp"),
        "{bad:?}"
    );
}
