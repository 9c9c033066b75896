//! The CPU time PostgreSQL spends, for `--backend postgres`: the cluster
//! `scripts/pg.sh` runs (`make pg`) is on this machine, so its processes'
//! times are in /proc (Linux; elsewhere nothing is reported).

use std::path::Path;

/// The postmaster of the cluster `scripts/pg.sh` started, if it runs here.
pub(super) fn postmaster() -> Option<u32> {
    let dir = std::fs::read_to_string(Path::new("target/pg/dir")).ok()?;
    let pid = std::fs::read_to_string(Path::new(dir.trim()).join("data/postmaster.pid")).ok()?;
    let pid: u32 = pid.lines().next()?.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

/// CPU seconds of the postmaster, its live children (backends, the WAL
/// writer, the checkpointer, …) and the children that have exited (which
/// the postmaster's `cutime`/`cstime` count).
pub(super) fn cpu_secs(postmaster: u32) -> f64 {
    let mut ticks = stat(postmaster).map_or(0.0, |f| f.utime + f.stime + f.cutime + f.cstime);
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(f) = stat(pid).filter(|f| f.ppid == postmaster) {
                ticks += f.utime + f.stime;
            }
        }
    }
    ticks / 100.0
}

/// The fields of /proc/<pid>/stat this needs, in clock ticks (100 a
/// second on Linux).
pub(super) struct Stat {
    ppid: u32,
    pub(super) utime: f64,
    pub(super) stime: f64,
    cutime: f64,
    cstime: f64,
}

pub(super) fn stat_of(path: &str) -> Option<Stat> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may hold spaces) start at ")":
    // state is field 3 of the line, index 0 here.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let at = |line_field: usize| -> f64 {
        fields
            .get(line_field - 3)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    Some(Stat {
        ppid: at(4) as u32,
        utime: at(14),
        stime: at(15),
        cutime: at(16),
        cstime: at(17),
    })
}

fn stat(pid: u32) -> Option<Stat> {
    stat_of(&format!("/proc/{pid}/stat"))
}
