//! `cli_args`: HAProxy's command-line flags. Pure parsing; no side effects.

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Run,
    Check,
    Help,
    Version,
    VersionVerbose,
    EvalCond(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub action: Action,
    pub files: Vec<PathBuf>,
    /// `-d`: foreground with verbose start-up.
    pub debug: bool,
    /// `-d`/`-db`: stay in the foreground even if the config says `daemon`.
    pub foreground: bool,
    /// `-D`
    pub daemon: bool,
    pub pidfile: Option<PathBuf>,
    pub quiet: bool,
    /// `-n N`: overrides global maxconn.
    pub maxconn: Option<u32>,
    /// `-sf PID...` / `-st PID...`: old processes to finish (SIGUSR1) / terminate (SIGTERM) once
    /// our listeners are up.
    pub finish_pids: Vec<i32>,
    pub terminate_pids: Vec<i32>,
    /// Flags accepted for compatibility that sluice has no use for (said under `-d`).
    pub ignored: Vec<String>,
    /// `-L NAME`: the local peer's name in `peers` sections.
    pub localpeer: Option<String>,
    /// `-x PATH`: take the listening sockets of the process behind this stats socket.
    pub sockets_from: Option<PathBuf>,
    /// `-W` / `-Ws`: master-worker mode (see `master`).
    pub master: bool,
    /// `-Ws`: tell systemd about readiness and reloads (`Type=notify` units).
    pub systemd: bool,
    /// `-S PATH[,OPTIONS]`: the master CLI's UNIX socket (master-worker mode).
    pub master_cli: Option<PathBuf>,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            action: Action::Run,
            files: Vec::new(),
            debug: false,
            foreground: false,
            daemon: false,
            pidfile: None,
            quiet: false,
            maxconn: None,
            finish_pids: Vec::new(),
            terminate_pids: Vec::new(),
            ignored: Vec::new(),
            localpeer: None,
            sockets_from: None,
            master: false,
            systemd: false,
            master_cli: None,
        };
        let mut i = 0;
        let value = |i: &mut usize, flag: &str| -> Result<String, String> {
            *i += 1;
            args.get(*i)
                .cloned()
                .ok_or_else(|| format!("option '{flag}' expects an argument"))
        };
        while i < args.len() {
            let a = args[i].as_str();
            match a {
                "--" => {
                    o.files.extend(args[i + 1..].iter().map(PathBuf::from));
                    break;
                }
                "-f" => o.files.push(PathBuf::from(value(&mut i, a)?)),
                "-c" => o.action = Action::Check,
                "-cc" => o.action = Action::EvalCond(value(&mut i, a)?),
                "-d" => {
                    o.debug = true;
                    o.foreground = true;
                }
                "-db" => o.foreground = true,
                "-D" => o.daemon = true,
                "-p" => o.pidfile = Some(PathBuf::from(value(&mut i, a)?)),
                "-v" => o.action = Action::Version,
                "-vv" => o.action = Action::VersionVerbose,
                "-h" | "--help" => o.action = Action::Help,
                "-q" => o.quiet = true,
                "-V" => o.quiet = false,
                "-n" => {
                    let v = value(&mut i, a)?;
                    o.maxconn = Some(
                        v.parse()
                            .map_err(|_| format!("option '-n' expects a number, got '{v}'"))?,
                    );
                }
                "-x" => o.sockets_from = Some(PathBuf::from(value(&mut i, a)?)),
                "-sf" | "-st" => {
                    let mut pids = Vec::new();
                    while let Some(p) = args.get(i + 1).and_then(|s| s.parse::<i32>().ok()) {
                        pids.push(p);
                        i += 1;
                    }
                    if a == "-sf" {
                        o.finish_pids.extend(pids);
                    } else {
                        o.terminate_pids.extend(pids);
                    }
                }
                "-S" => {
                    let v = value(&mut i, a)?;
                    // Bind options after a comma (`mode`, `user`, ...) are not supported.
                    let path = v.split(',').next().unwrap_or("");
                    if path.is_empty() {
                        return Err("'-S' expects a socket path".into());
                    }
                    o.master_cli = Some(PathBuf::from(path.trim_start_matches("unix@")));
                }
                "-L" => o.localpeer = Some(value(&mut i, a)?),
                "-m" | "-N" | "-C" => {
                    let v = value(&mut i, a)?;
                    o.ignored.push(format!("{a} {v}"));
                }
                "-W" => o.master = true,
                "-Ws" => {
                    o.master = true;
                    o.systemd = true;
                }
                "-dI" | "-dW" | "-dG" | "-de" | "-dp" | "-dS" | "-dr" | "-dV" | "-dK" | "-dR"
                | "-dD" | "-dF" | "-dZ" => o.ignored.push(a.to_string()),
                _ if a.starts_with("-dM") => o.ignored.push(a.to_string()),
                _ if a.starts_with('-') => return Err(format!("unknown option '{a}'")),
                // HAProxy treats a bare word as a config file too.
                _ => o.files.push(PathBuf::from(a)),
            }
            i += 1;
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Options, String> {
        Options::parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn haproxy_flags() {
        let o = p("-f a.cfg -f dir -db -dM -dI -L node1 -m 512 -p /tmp/p -sf 12 13 -c").unwrap();
        assert_eq!(o.files, vec![PathBuf::from("a.cfg"), PathBuf::from("dir")]);
        assert!(o.foreground && !o.debug);
        assert_eq!(o.action, Action::Check);
        assert_eq!(o.finish_pids, vec![12, 13]);
        assert_eq!(o.pidfile, Some(PathBuf::from("/tmp/p")));
        assert_eq!(o.ignored, vec!["-dM", "-dI", "-m 512"]);
        assert_eq!(o.localpeer.as_deref(), Some("node1"));
    }

    #[test]
    fn cc_and_errors() {
        assert_eq!(
            p("-cc defined(X)").unwrap().action,
            Action::EvalCond("defined(X)".into())
        );
        assert!(p("-zz").unwrap_err().contains("unknown option '-zz'"));
        assert!(p("-f").unwrap_err().contains("expects an argument"));
        assert_eq!(p("-- x.cfg y.cfg").unwrap().files.len(), 2);
    }
}
