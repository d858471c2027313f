//! `forkscope record`: a scenario played headless, the dashboard recorded as it plays.

use super::{Which, outln, runtime, which_parser};
use forkscope::record::{Format, FormatError, RecordError};
use forkscope::scenario::{self, ScenarioError};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    scenario: PathBuf,
    /// Where to write the recording: FILE.cast or FILE.svg.
    #[arg(long)]
    out: PathBuf,
    /// With an .svg output: only the final frame, as a still picture.
    #[arg(long)]
    still: bool,
    /// naive, fenced, or both side by side (default: the policies the file names, as `run`
    /// plays it; a scenario saved from the dashboard names the one it was made under).
    #[arg(long, value_parser = which_parser())]
    policy: Option<Which>,
    /// Terminal size of the recording, WIDTHxHEIGHT.
    #[arg(long, default_value = "120x36", value_parser = parse_size)]
    size: (u16, u16),
}

/// `--size` that is not a terminal size the recorder draws.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("expected WIDTHxHEIGHT, e.g. 120x36")]
    Shape,
    #[error("bad width {0:?}")]
    Width(String),
    #[error("bad height {0:?}")]
    Height(String),
    #[error("the size must be between 60x20 and 400x200")]
    OutOfRange,
}

fn parse_size(s: &str) -> Result<(u16, u16), SizeError> {
    let (w, h) = s.split_once(['x', 'X']).ok_or(SizeError::Shape)?;
    let w: u16 = w.parse().map_err(|_| SizeError::Width(w.to_owned()))?;
    let h: u16 = h.parse().map_err(|_| SizeError::Height(h.to_owned()))?;
    if w < 60 || h < 20 || w > 400 || h > 200 {
        return Err(SizeError::OutOfRange);
    }
    Ok((w, h))
}

#[derive(Debug, thiserror::Error)]
pub enum RecordFailure {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Record(#[from] RecordError),
}

pub fn run(args: RecordArgs) -> Result<ExitCode, RecordFailure> {
    let format = Format::for_path(&args.out, args.still)?;
    let s = scenario::load(&args.scenario)?;
    let (width, height) = args.size;
    let policies = args.policy.map_or_else(|| s.policy.list(), Which::policies);
    let verdicts = runtime().block_on(forkscope::record::record_scenario(
        &s,
        &policies,
        &args.out,
        format,
        width,
        height,
        forkscope::tui::ui::draw_still,
    ))?;
    outln!("recorded {} — {}", args.out.display(), verdicts.join("; "));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_or_refused_with_a_reason() {
        assert_eq!(parse_size("120x36"), Ok((120, 36)));
        assert_eq!(parse_size("80X24"), Ok((80, 24)));
        assert_eq!(parse_size("120"), Err(SizeError::Shape));
        assert_eq!(parse_size("wx36"), Err(SizeError::Width("w".into())));
        assert_eq!(parse_size("120x"), Err(SizeError::Height(String::new())));
        assert_eq!(parse_size("59x36"), Err(SizeError::OutOfRange));
    }
}
