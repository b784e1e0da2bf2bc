//! The process's own metrics under the names every Prometheus client library uses
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...), read from `/proc`, and
//! `sluice_build_info`.

use super::exposition::{Exposition, Kind};

/// What `/proc/self/stat` and friends say about this process.
#[derive(Debug, Default, PartialEq)]
struct ProcessStats {
    cpu_seconds: f64,
    threads: u64,
    start_time_seconds: f64,
    virtual_memory_bytes: u64,
    resident_memory_bytes: u64,
}

/// Parses `/proc/self/stat` (fields after the parenthesised command name, which may itself
/// hold spaces and parentheses), given the clock tick, page size and boot time.
fn parse_stat(
    stat: &str,
    ticks_per_second: f64,
    page_bytes: u64,
    boot_time_seconds: f64,
) -> Option<ProcessStats> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name; `proc(5)` numbers from 1.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |number: usize| -> Option<u64> { fields.get(number - 3)?.parse().ok() };
    Some(ProcessStats {
        cpu_seconds: (field(14)? + field(15)?) as f64 / ticks_per_second,
        threads: field(20)?,
        start_time_seconds: boot_time_seconds + field(22)? as f64 / ticks_per_second,
        virtual_memory_bytes: field(23)?,
        resident_memory_bytes: field(24)?.saturating_mul(page_bytes),
    })
}

fn boot_time_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

fn read_stats() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // SAFETY: sysconf reads configuration values and touches no memory of ours.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    parse_stat(
        &stat,
        if ticks > 0 { ticks as f64 } else { 100.0 },
        u64::try_from(page).unwrap_or(4096),
        boot_time_seconds()?,
    )
}

fn open_fds() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}

fn max_fds() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and nothing else.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (read == 0).then_some(limit.rlim_cur)
}

/// Writes the `process_*` families (those `/proc` answered) and `sluice_build_info`.
pub fn collect(out: &mut Exposition) {
    if let Some(stats) = read_stats() {
        out.single(
            "process_cpu_seconds_total",
            Kind::Counter,
            "User and system CPU time spent in seconds.",
            stats.cpu_seconds,
        );
        out.single(
            "process_resident_memory_bytes",
            Kind::Gauge,
            "Resident memory size in bytes.",
            stats.resident_memory_bytes,
        );
        out.single(
            "process_virtual_memory_bytes",
            Kind::Gauge,
            "Virtual memory size in bytes.",
            stats.virtual_memory_bytes,
        );
        out.single(
            "process_start_time_seconds",
            Kind::Gauge,
            "Start time of the process since unix epoch in seconds.",
            stats.start_time_seconds,
        );
        out.single(
            "process_threads",
            Kind::Gauge,
            "Number of OS threads in the process.",
            stats.threads,
        );
    }
    if let Some(open) = open_fds() {
        out.single(
            "process_open_fds",
            Kind::Gauge,
            "Number of open file descriptors.",
            open,
        );
    }
    if let Some(max) = max_fds() {
        out.single(
            "process_max_fds",
            Kind::Gauge,
            "Maximum number of open file descriptors.",
            max,
        );
    }
    out.family(
        "sluice_build_info",
        Kind::Gauge,
        "1, labelled with the version of this binary and how it was built.",
    )
    .sample(
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            (
                "profile",
                if cfg!(debug_assertions) {
                    "debug"
                } else {
                    "release"
                },
            ),
        ],
        1u8,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_a_command_name_with_spaces_and_parentheses() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize rss
        let stat = "4242 (sl (uice) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 50 0 0 20 0 17 0 1000 123456789 2048 18446744073709551615";
        assert_eq!(
            parse_stat(stat, 100.0, 4096, 1_700_000_000.0),
            Some(ProcessStats {
                cpu_seconds: 3.0,
                threads: 17,
                start_time_seconds: 1_700_000_010.0,
                virtual_memory_bytes: 123_456_789,
                resident_memory_bytes: 2048 * 4096,
            })
        );
        assert_eq!(parse_stat("4242 (truncated", 100.0, 4096, 0.0), None);
        assert_eq!(parse_stat("4242 (x) S 1 2", 100.0, 4096, 0.0), None);
    }

    #[test]
    fn this_process_reports_itself() {
        let mut out = Exposition::new();
        collect(&mut out);
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_start_time_seconds",
            "process_open_fds",
            "process_max_fds",
            "sluice_build_info",
        ] {
            assert!(out.has_family(family), "{family}");
        }
        let stats = read_stats().expect("/proc/self/stat");
        assert!(stats.resident_memory_bytes > 0 && stats.threads >= 1);
    }
}
