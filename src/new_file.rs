//! Writing a file that must not exist yet (a counterexample from `check`, a run saved from the
//! dashboard): the text goes to a temporary file beside the target and is moved into place only
//! if nothing is there, so the file appears complete or not at all, and a file that exists —
//! even one made a moment ago by someone else — is never overwritten.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// A new file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum NewFileError {
    #[error("{} already exists; not overwriting it", path.display())]
    Exists { path: PathBuf },
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{first} to {last} all exist in {}", dir.display())]
    AllTaken {
        dir: PathBuf,
        first: String,
        last: String,
    },
}

/// Writes `text` to `path`, which must not exist.
pub fn write_new(path: &Path, text: &str) -> Result<(), NewFileError> {
    let io = |source| NewFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.as_file().sync_all().map_err(io)?;
    // The temporary file is removed when the move fails.
    file.persist_noclobber(path)
        .map_err(|e| match e.error.kind() {
            std::io::ErrorKind::AlreadyExists => NewFileError::Exists {
                path: path.to_path_buf(),
            },
            _ => io(e.error),
        })?;
    Ok(())
}

/// Writes `text` to `<stem>-N.toml` in `dir`, the first N from 1 not taken, and says which.
pub fn write_numbered(dir: &Path, stem: &str, text: &str) -> Result<PathBuf, NewFileError> {
    const LAST: u32 = 999;
    for n in 1..=LAST {
        let path = dir.join(format!("{stem}-{n}.toml"));
        match write_new(&path, text) {
            Err(NewFileError::Exists { .. }) => continue,
            written => return written.map(|()| path),
        }
    }
    Err(NewFileError::AllTaken {
        dir: dir.to_path_buf(),
        first: format!("{stem}-1.toml"),
        last: format!("{stem}-{LAST}.toml"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.toml");
        write_new(&path, "name = \"x\"\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "name = \"x\"\n");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file is left beside it"
        );
    }

    #[test]
    fn an_existing_file_is_left_untouched_and_the_error_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine.toml");
        std::fs::write(&path, "precious").unwrap();
        let refused = write_new(&path, "other").unwrap_err();
        assert!(
            matches!(&refused, NewFileError::Exists { path: p } if *p == path),
            "{refused:?}"
        );
        assert!(
            refused
                .to_string()
                .contains("already exists; not overwriting it"),
            "{refused}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_missing_directory_is_an_io_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent").join("x.toml");
        let failed = write_new(&path, "x").unwrap_err();
        assert!(matches!(failed, NewFileError::Io { .. }), "{failed:?}");
        assert!(failed.to_string().contains("x.toml"), "{failed}");
    }

    #[test]
    fn numbered_files_take_the_first_free_number() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("saved-1.toml"), "one").unwrap();
        let second = write_numbered(dir.path(), "saved", "two").unwrap();
        assert_eq!(second, dir.path().join("saved-2.toml"));
        assert_eq!(std::fs::read_to_string(&second).unwrap(), "two");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("saved-1.toml")).unwrap(),
            "one"
        );
    }
}
