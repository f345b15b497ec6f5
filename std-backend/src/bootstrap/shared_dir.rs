//! Cards as files in a directory every process of the job can reach: one
//! host's `/tmp`, or a shared filesystem across hosts. A card is written
//! to a temporary name and renamed into place, so a reader sees it whole
//! or not at all.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use btl_core::endpoint::ProcName;

use super::{Bootstrap, BootstrapError, Card};

/// How often a lookup looks again for a card not yet there.
const POLL: Duration = Duration::from_millis(10);

/// A directory of cards, `<root>/job-<job>/<rank>.card`.
#[derive(Debug, Clone)]
pub struct SharedDir {
    root: PathBuf,
}

impl SharedDir {
    /// Cards under `root`, which is created when the first card is
    /// published.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SharedDir { root: root.into() }
    }

    /// Where the card of `proc` lives.
    pub fn path_of(&self, proc: ProcName) -> PathBuf {
        self.job_dir(proc).join(format!("{}.card", proc.rank))
    }

    fn job_dir(&self, proc: ProcName) -> PathBuf {
        self.root.join(format!("job-{}", proc.job))
    }

    fn read(path: &Path) -> Result<Option<String>, BootstrapError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(BootstrapError::Io {
                what: format!("reading {}", path.display()),
                source: e,
            }),
        }
    }
}

impl Bootstrap for SharedDir {
    fn publish(&self, card: &Card) -> Result<(), BootstrapError> {
        let dir = self.job_dir(card.proc);
        let io = |what: String| move |e| BootstrapError::Io { what, source: e };
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let path = self.path_of(card.proc);
        let temp = dir.join(format!(".{}.card.{}", card.proc.rank, std::process::id()));
        std::fs::write(&temp, card.to_string())
            .map_err(io(format!("writing {}", temp.display())))?;
        std::fs::rename(&temp, &path).map_err(io(format!("renaming to {}", path.display())))
    }

    /// Removes the card file if it is still `card` (a later start of the
    /// same process may have replaced it), and the job's directory once
    /// it is empty.
    fn withdraw(&self, card: &Card) -> Result<(), BootstrapError> {
        let path = self.path_of(card.proc);
        if Self::read(&path)?.is_some_and(|text| text == card.to_string()) {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(BootstrapError::Io {
                        what: format!("removing {}", path.display()),
                        source: e,
                    });
                }
            }
        }
        // Fails, as it should, while other cards are there.
        let _ = std::fs::remove_dir(self.job_dir(card.proc));
        Ok(())
    }

    fn lookup(&self, proc: ProcName, timeout: Duration) -> Result<Card, BootstrapError> {
        let path = self.path_of(proc);
        let start = Instant::now();
        loop {
            if let Some(text) = Self::read(&path)? {
                let card = Card::parse(&text).map_err(|e| BootstrapError::Card {
                    source: e,
                    where_: path.display().to_string(),
                })?;
                return Ok(card);
            }
            if start.elapsed() >= timeout {
                return Err(BootstrapError::Timeout {
                    proc,
                    timeout,
                    where_: path.display().to_string(),
                });
            }
            std::thread::sleep(POLL.min(timeout.saturating_sub(start.elapsed())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::Contact;

    fn temp_root(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("btl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        root
    }

    #[test]
    fn a_published_card_is_found_and_a_late_one_waited_for() {
        let root = temp_root("shared-dir");
        let dir = SharedDir::new(&root);
        let mut card = Card::new(ProcName::new(11, 0));
        card.contacts.push(Contact {
            component: "tcp".into(),
            addr: "127.0.0.1:4000".parse().expect("addr"),
            prefix: 8,
        });
        dir.publish(&card).expect("publish");
        assert_eq!(dir.lookup(card.proc, Duration::ZERO).expect("found"), card);

        let late = ProcName::new(11, 1);
        let writer = {
            let dir = dir.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                dir.publish(&Card::new(late)).expect("publish");
            })
        };
        let found = dir
            .lookup(late, Duration::from_secs(10))
            .expect("waited for");
        assert_eq!(found.proc, late);
        writer.join().expect("writer");

        let err = dir
            .lookup(ProcName::new(11, 2), Duration::from_millis(30))
            .expect_err("never published");
        assert!(err.to_string().contains("2.card"), "{err}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_damaged_card_is_an_error_naming_the_file() {
        let root = temp_root("damaged");
        let dir = SharedDir::new(&root);
        let proc = ProcName::new(12, 0);
        std::fs::create_dir_all(dir.job_dir(proc)).expect("dir");
        std::fs::write(dir.path_of(proc), "garbage here").expect("write");
        let err = dir.lookup(proc, Duration::ZERO).expect_err("damaged");
        assert!(err.to_string().contains("0.card"), "{err}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
