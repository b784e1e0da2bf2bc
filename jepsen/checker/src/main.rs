//! `sluice-jepsen-check HISTORY.jsonl [--out results.json]`: checks a history, prints a
//! summary, writes the report as JSON, and exits 1 when the history has anomalies.

use anyhow::Context;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<bool> {
    let mut args = std::env::args().skip(1);
    let history_path = args
        .next()
        .context("usage: sluice-jepsen-check HISTORY.jsonl [--out results.json]")?;
    let mut out = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => out = Some(args.next().context("--out needs a path")?),
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    let text = std::fs::read_to_string(&history_path)
        .with_context(|| format!("reading {history_path}"))?;
    let history = sluice_jepsen::parse(&text)?;
    let report = sluice_jepsen::check(&history);
    print!("{}", sluice_jepsen::summary(&report));
    if let Some(out) = out {
        std::fs::write(&out, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {out}"))?;
    }
    Ok(report.valid)
}
