//! `tokenizer`: HAProxy's configuration-language lexer — words, quotes, escapes, environment
//! variables, and `.if/.elif/.else/.endif` blocks. Knows nothing about sections or keywords.

use super::ConfigError;

/// One active configuration line, split into words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub file: String,
    pub line: usize,
    pub words: Vec<String>,
    /// What the tokenizer has to say about the line (a `$` kept as written).
    pub warnings: Vec<String>,
}

thread_local! {
    /// Warnings of the line [`split_line`] last split.
    static SPLIT_WARNINGS: std::cell::RefCell<Vec<String>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Features `feature(NAME)` reports as present.
/// `OPENSSL` (configurations test it before `ssl` binds; sluice's TLS is rustls) and `ZLIB`
/// (before `compression`) are reported for what they guard.
const FEATURES: &[&str] = &[
    "THREAD",
    "REUSEPORT",
    "LINUX_TPROXY",
    "PCRE2_JIT_LIKE",
    "OPENSSL",
    "ZLIB",
];

/// The environment as `setenv`, `presetenv`, `unsetenv` and `resetenv` (in `global`) leave
/// it, over the process's own: HAProxy changes its real environment as it reads those lines,
/// so that the next line sees the change; sluice keeps the changes here instead (the process
/// environment is not written while threads may read it), for the lines after them and for
/// the `env()` fetch at run time.
#[derive(Debug, Clone, Default)]
pub struct EnvOverlay {
    /// Variables set (`Some`) or removed (`None`) by those lines.
    set: std::collections::HashMap<String, Option<String>>,
    /// After `resetenv`: the only process variables still visible.
    keep_only: Option<std::collections::HashSet<String>>,
}

thread_local! {
    /// The environment changes of the configuration being loaded on this thread, complete
    /// (all files read): what `env()` fetches resolve against.
    static FINAL_ENV: std::cell::RefCell<EnvOverlay> = std::cell::RefCell::new(EnvOverlay::default());
}

/// Records the environment changes of the configuration being loaded.
pub fn set_final_env(o: EnvOverlay) {
    FINAL_ENV.with(|e| *e.borrow_mut() = o);
}

/// An environment variable as the configuration being loaded sees it (after its `setenv`,
/// `unsetenv`, ... lines).
pub fn env_var(name: &str) -> Option<String> {
    FINAL_ENV.with(|e| e.borrow().get(name, &|k| std::env::var(k).ok()))
}

/// The keywords that change the environment.
pub const ENV_KEYWORDS: &[&str] = &["setenv", "presetenv", "unsetenv", "resetenv"];

impl EnvOverlay {
    /// `name`'s value: the overlay's, else the process's (`base`) unless `resetenv` hid it.
    pub fn get(&self, name: &str, base: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        if let Some(v) = self.set.get(name) {
            return v.clone();
        }
        match &self.keep_only {
            Some(keep) if !keep.contains(name) => None,
            _ => base(name),
        }
    }

    /// Applies one of [`ENV_KEYWORDS`] (`words[0]`); a line with the wrong number of
    /// arguments changes nothing (the `global` parser reports it).
    fn apply(&mut self, words: &[String], base: &dyn Fn(&str) -> Option<String>) {
        match (words[0].as_str(), words.len()) {
            ("setenv", 3) => {
                self.set.insert(words[1].clone(), Some(words[2].clone()));
            }
            ("presetenv", 3) if self.get(&words[1], base).is_none() => {
                self.set.insert(words[1].clone(), Some(words[2].clone()));
            }
            ("unsetenv", _) => {
                for n in &words[1..] {
                    self.set.insert(n.clone(), None);
                }
            }
            ("resetenv", _) => {
                let keep: std::collections::HashSet<String> = words[1..].iter().cloned().collect();
                // Variables set earlier go too, unless named.
                self.set.retain(|k, _| keep.contains(k));
                self.keep_only = Some(match self.keep_only.take() {
                    Some(old) => keep.into_iter().filter(|k| old.contains(k)).collect(),
                    None => keep,
                });
            }
            _ => {}
        }
    }
}

/// Splits one line into words. Errors: unmatched quote, bad escape, bad variable syntax.
pub fn split_line(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<String>, String> {
    let b = text.as_bytes();
    let mut words: Vec<String> = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    // A word exists once a quote opened or any byte was added (so `""` is an empty word).
    let mut in_word = false;
    // Whether the current word consists only of an unquoted variable that expanded to nothing.
    let mut only_empty_var = false;
    let mut i = 0;
    #[derive(PartialEq)]
    enum Q {
        None,
        Double,
        Single,
    }
    let mut q = Q::None;
    let flush = |cur: &mut Vec<u8>,
                 words: &mut Vec<String>,
                 in_word: &mut bool,
                 only_empty_var: &mut bool| {
        if *in_word && !(*only_empty_var && cur.is_empty()) {
            words.push(String::from_utf8_lossy(cur).into_owned());
        }
        cur.clear();
        *in_word = false;
        *only_empty_var = false;
    };
    while i < b.len() {
        let c = b[i];
        match q {
            Q::Single => {
                if c == b'\'' {
                    q = Q::None;
                } else {
                    cur.push(c);
                }
                i += 1;
                continue;
            }
            Q::Double | Q::None => {}
        }
        match c {
            b'#' if q == Q::None => break,
            b' ' | b'\t' | b'\r' | b'\n' if q == Q::None => {
                flush(&mut cur, &mut words, &mut in_word, &mut only_empty_var);
                i += 1;
            }
            b'"' => {
                q = if q == Q::Double { Q::None } else { Q::Double };
                in_word = true;
                only_empty_var = false;
                i += 1;
            }
            b'\'' if q == Q::None => {
                q = Q::Single;
                in_word = true;
                only_empty_var = false;
                i += 1;
            }
            b'\\' => {
                let Some(&n) = b.get(i + 1) else {
                    return Err("truncated escape sequence at end of line".into());
                };
                let (out, adv) = match n {
                    b'r' => (b'\r', 2),
                    b'n' => (b'\n', 2),
                    b't' => (b'\t', 2),
                    b'x' => {
                        let hex = b
                            .get(i + 2..i + 4)
                            .and_then(|h| std::str::from_utf8(h).ok());
                        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                            Some(v) => (v, 4),
                            None => {
                                return Err("invalid '\\x' escape: two hex digits expected".into());
                            }
                        }
                    }
                    b' ' | b'\\' | b'#' | b'\'' | b'"' => (n, 2),
                    // `\$` escapes a variable only inside double quotes (HAProxy's rule).
                    b'$' if q == Q::Double => (n, 2),
                    // Anything else is not an escape: the backslash stays, and the next
                    // character is read as usual (`\1` in a replacement, `\.` or `\d` in a
                    // regex reach the keyword as written).
                    _ => (b'\\', 1),
                };
                cur.push(out);
                in_word = true;
                only_empty_var = false;
                i += adv;
            }
            b'$' => {
                let (name, default, adv) = match parse_var(&b[i..]) {
                    Ok(v) => v,
                    // HAProxy expands variables only inside double quotes: outside them, a
                    // reference sluice cannot read (`${NAME:-default}`) stays as written, as
                    // HAProxy would keep it, rather than failing the file.
                    Err(e) if q == Q::None => {
                        let end = b[i..]
                            .iter()
                            .position(|&c| c == b'}' || c == b' ' || c == b'\t')
                            .map_or(b.len(), |p| i + p + usize::from(b[i + p] == b'}'));
                        SPLIT_WARNINGS.with(|w| {
                            w.borrow_mut().push(format!(
                                "'{}' is kept as written ({e}); HAProxy expands variables only \
                                 inside double quotes",
                                String::from_utf8_lossy(&b[i..end])
                            ))
                        });
                        cur.push(b'$');
                        in_word = true;
                        only_empty_var = false;
                        i += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if adv == 1 {
                    // A lone '$' not followed by a name: literal.
                    cur.push(b'$');
                    in_word = true;
                    only_empty_var = false;
                    i += 1;
                    continue;
                }
                let val = env(&name).or(default).unwrap_or_default();
                if !in_word && q == Q::None {
                    only_empty_var = true;
                } else if !val.is_empty() || q != Q::None {
                    only_empty_var = false;
                }
                if !val.is_empty() {
                    only_empty_var = false;
                }
                cur.extend_from_slice(val.as_bytes());
                in_word = true;
                i += adv;
            }
            _ => {
                cur.push(c);
                in_word = true;
                only_empty_var = false;
                i += 1;
            }
        }
    }
    match q {
        Q::None => {}
        Q::Double => return Err("unmatched quote (\")".into()),
        Q::Single => return Err("unmatched quote (')".into()),
    }
    flush(&mut cur, &mut words, &mut in_word, &mut only_empty_var);
    Ok(words)
}

/// Parses `$NAME`, `${NAME}` or `${NAME-default}` at the start of `b`; returns the name, the
/// default and the bytes consumed (1 = not a variable).
fn parse_var(b: &[u8]) -> Result<(String, Option<String>, usize), String> {
    let is_name = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    if b.get(1) == Some(&b'{') {
        let close = b
            .iter()
            .position(|&c| c == b'}')
            .ok_or_else(|| "unterminated '${' variable reference".to_string())?;
        let inner = &b[2..close];
        let name_len = inner.iter().take_while(|&&c| is_name(c)).count();
        if name_len == 0 {
            return Err(format!(
                "invalid variable name in '{}'",
                String::from_utf8_lossy(&b[..=close])
            ));
        }
        let name = String::from_utf8_lossy(&inner[..name_len]).into_owned();
        let rest = &inner[name_len..];
        let default = match rest.first() {
            None => None,
            Some(b'-') => Some(String::from_utf8_lossy(&rest[1..]).into_owned()),
            Some(_) => {
                return Err(format!(
                    "invalid variable reference '{}' (expected '${{NAME}}' or '${{NAME-default}}')",
                    String::from_utf8_lossy(&b[..=close])
                ));
            }
        };
        return Ok((name, default, close + 1));
    }
    let n = b[1..].iter().take_while(|&&c| is_name(c)).count();
    if n == 0 {
        return Ok((String::new(), None, 1));
    }
    Ok((
        String::from_utf8_lossy(&b[1..1 + n]).into_owned(),
        None,
        1 + n,
    ))
}

/// State of one `.if` level.
struct Block {
    /// Line of the `.if`, for unbalanced-block errors.
    opened_at: usize,
    /// The enclosing level was active.
    parent_active: bool,
    /// Some branch of this block was already taken.
    taken: bool,
    /// The current branch is active.
    active: bool,
    seen_else: bool,
}

/// Tokenizes a whole file, applying `.if` blocks. Returns the active lines and every error.
pub fn tokenize(
    file: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> (Vec<Line>, Vec<ConfigError>) {
    let mut overlay = EnvOverlay::default();
    tokenize_with(file, text, env, &mut overlay)
}

/// [`tokenize`], with the environment changes of earlier files (`overlay`), to which this
/// file's `setenv`-family lines are added as they come.
pub fn tokenize_with(
    file: &str,
    text: &str,
    base: &dyn Fn(&str) -> Option<String>,
    overlay: &mut EnvOverlay,
) -> (Vec<Line>, Vec<ConfigError>) {
    let mut lines = Vec::new();
    let mut errors = Vec::new();
    let mut stack: Vec<Block> = Vec::new();
    let err = |line: usize, message: String| ConfigError {
        file: file.to_string(),
        line,
        message,
    };
    for (idx, raw) in text.lines().enumerate() {
        let n = idx + 1;
        let active = stack.last().is_none_or(|b| b.active);
        let ov = &*overlay;
        let env = &|k: &str| ov.get(k, base);
        let _ = SPLIT_WARNINGS.with(|w| std::mem::take(&mut *w.borrow_mut()));
        let words = match split_line(raw, env) {
            Ok(w) => w,
            Err(e) => {
                if active {
                    errors.push(err(n, e));
                }
                continue;
            }
        };
        let Some(first) = words.first() else { continue };
        if first.starts_with('.') {
            let cond = words[1..].join(" ");
            match first.as_str() {
                ".if" => {
                    let v = if active {
                        match eval_expr(&cond, env) {
                            Ok(v) => v,
                            Err(e) => {
                                errors.push(err(
                                    n,
                                    format!("failed to evaluate .if condition '{cond}': {e}"),
                                ));
                                false
                            }
                        }
                    } else {
                        false
                    };
                    stack.push(Block {
                        opened_at: n,
                        parent_active: active,
                        taken: v,
                        active: v && active,
                        seen_else: false,
                    });
                }
                ".elif" => match stack.last_mut() {
                    None => errors.push(err(n, "'.elif' without a matching '.if'".into())),
                    Some(b) if b.seen_else => errors.push(err(n, "'.elif' after '.else'".into())),
                    Some(b) => {
                        if b.taken || !b.parent_active {
                            b.active = false;
                        } else {
                            let v = match eval_expr(&cond, env) {
                                Ok(v) => v,
                                Err(e) => {
                                    errors.push(err(
                                        n,
                                        format!("failed to evaluate .elif condition '{cond}': {e}"),
                                    ));
                                    false
                                }
                            };
                            b.active = v;
                            b.taken = v;
                        }
                    }
                },
                ".else" => match stack.last_mut() {
                    None => errors.push(err(n, "'.else' without a matching '.if'".into())),
                    Some(b) if b.seen_else => errors.push(err(n, "'.else' after '.else'".into())),
                    Some(b) => {
                        b.seen_else = true;
                        b.active = b.parent_active && !b.taken;
                        b.taken = true;
                    }
                },
                // Not a match guard: a guard that pops would fall through to "unknown
                // directive" when the pop succeeds.
                ".endif" => match stack.pop() {
                    Some(_) => {}
                    None => errors.push(err(n, "'.endif' without a matching '.if'".into())),
                },
                ".diag" | ".notice" | ".warning" if active => {
                    crate::say!(
                        "[{}] (sluice) : config : {file}:{n}: {cond}",
                        first.trim_start_matches('.').to_uppercase()
                    );
                }
                ".alert" if active => errors.push(err(n, cond)),
                ".diag" | ".notice" | ".warning" | ".alert" => {}
                other if active => errors.push(err(n, format!("unknown directive '{other}'"))),
                _ => {}
            }
            continue;
        }
        if active {
            if ENV_KEYWORDS.contains(&first.as_str()) {
                overlay.apply(&words, base);
            }
            lines.push(Line {
                file: file.to_string(),
                line: n,
                words,
                warnings: SPLIT_WARNINGS.with(|w| std::mem::take(&mut *w.borrow_mut())),
            });
        }
    }
    for b in stack {
        errors.push(err(
            b.opened_at,
            "'.if' block is not closed (missing '.endif')".into(),
        ));
    }
    (lines, errors)
}

/// Evaluates a `.if` condition given as text (`sluice -cc EXPR`): quotes and variables are
/// processed first, as on a configuration line.
pub fn eval_condition(expr: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<bool, String> {
    let words = split_line(expr, env)?;
    eval_expr(&words.join(" "), env)
}

/// Condition grammar: `expr := and ('||' and)*`, `and := unary ('&&' unary)*`,
/// `unary := '!' unary | '(' expr ')' | term`.
fn eval_expr(s: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<bool, String> {
    let mut p = CondParser {
        s: s.as_bytes(),
        i: 0,
        env,
    };
    let v = p.or()?;
    p.skip_ws();
    if p.i != p.s.len() {
        return Err(format!(
            "unexpected '{}'",
            String::from_utf8_lossy(&p.s[p.i..])
        ));
    }
    Ok(v)
}

struct CondParser<'a> {
    s: &'a [u8],
    i: usize,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl CondParser<'_> {
    fn skip_ws(&mut self) {
        while self.i < self.s.len() && (self.s[self.i] == b' ' || self.s[self.i] == b'\t') {
            self.i += 1;
        }
    }

    fn eat(&mut self, tok: &[u8]) -> bool {
        self.skip_ws();
        if self.s[self.i..].starts_with(tok) {
            self.i += tok.len();
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Result<bool, String> {
        let mut v = self.and()?;
        while self.eat(b"||") {
            let r = self.and()?;
            v = v || r;
        }
        Ok(v)
    }

    fn and(&mut self) -> Result<bool, String> {
        let mut v = self.unary()?;
        while self.eat(b"&&") {
            let r = self.unary()?;
            v = v && r;
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<bool, String> {
        if self.eat(b"!") {
            return Ok(!self.unary()?);
        }
        if self.eat(b"(") {
            let v = self.or()?;
            if !self.eat(b")") {
                return Err("missing ')'".into());
            }
            return Ok(v);
        }
        self.term()
    }

    fn term(&mut self) -> Result<bool, String> {
        self.skip_ws();
        let start = self.i;
        while self.i < self.s.len()
            && !matches!(
                self.s[self.i],
                b' ' | b'\t' | b'(' | b')' | b'&' | b'|' | b'!'
            )
        {
            self.i += 1;
        }
        let word = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        if word.is_empty() {
            return Err("missing term".into());
        }
        if self.i < self.s.len() && self.s[self.i] == b'(' {
            // Function call: arguments up to the matching ')', split on commas.
            let open = self.i;
            let close = self.s[open..]
                .iter()
                .position(|&c| c == b')')
                .map(|p| open + p)
                .ok_or_else(|| format!("missing ')' after '{word}('"))?;
            let inner = String::from_utf8_lossy(&self.s[open + 1..close]).into_owned();
            self.i = close + 1;
            let args: Vec<&str> = if inner.is_empty() {
                Vec::new()
            } else {
                inner.split(',').map(str::trim).collect()
            };
            let want = |n: usize| -> Result<(), String> {
                if args.len() == n {
                    Ok(())
                } else {
                    Err(format!(
                        "'{word}' expects {n} argument(s), got {}",
                        args.len()
                    ))
                }
            };
            return match word.as_str() {
                "defined" => {
                    want(1)?;
                    Ok((self.env)(args[0]).is_some())
                }
                "feature" => {
                    want(1)?;
                    Ok(FEATURES.contains(&args[0]))
                }
                "streq" => {
                    want(2)?;
                    Ok(args[0] == args[1])
                }
                "strneq" => {
                    want(2)?;
                    Ok(args[0] != args[1])
                }
                "version_atleast" => {
                    want(1)?;
                    Ok(cmp_version(super::HAPROXY_COMPAT_VERSION, args[0])?
                        != std::cmp::Ordering::Less)
                }
                "version_before" => {
                    want(1)?;
                    Ok(cmp_version(super::HAPROXY_COMPAT_VERSION, args[0])?
                        == std::cmp::Ordering::Less)
                }
                _ => Err(format!("unknown function '{word}'")),
            };
        }
        // A bare term: an integer is true when non-zero.
        match word.parse::<i64>() {
            Ok(n) => Ok(n != 0),
            Err(_) => Err(format!(
                "unparsable term '{word}' (expected a function call or an integer)"
            )),
        }
    }
}

/// Compares dotted versions numerically ("2.6" vs "2.10"); missing parts count as 0.
fn cmp_version(a: &str, b: &str) -> Result<std::cmp::Ordering, String> {
    let parse = |v: &str| -> Result<Vec<u64>, String> {
        let core = v.split(['-', '+']).next().unwrap_or("");
        core.split('.')
            .map(|p| {
                p.parse::<u64>()
                    .map_err(|_| format!("invalid version '{v}'"))
            })
            .collect()
    };
    let (mut x, mut y) = (parse(a)?, parse(b)?);
    let n = x.len().max(y.len());
    x.resize(n, 0);
    y.resize(n, 0);
    Ok(x.cmp(&y))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "PORT" => Some("8080".into()),
            "EMPTY" => Some(String::new()),
            "lower_name" => Some("low".into()),
            _ => None,
        }
    }

    fn w(s: &str) -> Vec<String> {
        split_line(s, &env).unwrap()
    }

    #[test]
    fn setenv_family_changes_what_later_lines_and_files_see() {
        let text = "global\n\
            \x20   setenv BE_PORT 9000\n\
            \x20   presetenv PORT 1\n\
            \x20   presetenv NEW \"a b\"\n\
            \x20   x ${BE_PORT} $PORT \"$NEW\"\n\
            \x20   unsetenv PORT\n\
            \x20   y ${PORT-none}\n\
            .if defined(BE_PORT)\n\
            \x20   z\n\
            .endif\n";
        let mut ov = EnvOverlay::default();
        let (lines, errs) = tokenize_with("a.cfg", text, &env, &mut ov);
        assert!(errs.is_empty(), "{errs:?}");
        let words: Vec<_> = lines.iter().map(|l| l.words.join(" ")).collect();
        // presetenv keeps PORT's value from the environment.
        assert!(words.contains(&"x 9000 8080 a b".to_string()), "{words:?}");
        assert!(words.contains(&"y none".to_string()), "{words:?}");
        assert!(words.contains(&"z".to_string()), "{words:?}");
        // A second file sees the first one's changes; resetenv hides the rest.
        let (lines, _) = tokenize_with(
            "b.cfg",
            "a $BE_PORT\nresetenv lower_name\nb ${BE_PORT-gone} ${lower_name} ${EMPTY-unset}\n",
            &env,
            &mut ov,
        );
        let words: Vec<_> = lines.iter().map(|l| l.words.join(" ")).collect();
        assert_eq!(words, ["a 9000", "resetenv lower_name", "b gone low unset"]);
    }

    #[test]
    fn words_quotes_escapes() {
        assert_eq!(
            w("  bind  :80   name x # comment"),
            ["bind", ":80", "name", "x"]
        );
        assert_eq!(w(r#"a "b c" 'd e' f\ g"#), ["a", "b c", "d e", "f g"]);
        assert_eq!(w(r#"x "" y"#), ["x", "", "y"]);
        assert_eq!(w(r##"x "# not a comment""##), ["x", "# not a comment"]);
        assert_eq!(w(r"a\#b \x41 \\"), ["a#b", "A", "\\"]);
        // Not escapes: the backslash is kept (regexes and `\1` replacements).
        assert_eq!(w(r#"^/a\.b\d+$ /\1 "\w""#), [r"^/a\.b\d+$", r"/\1", r"\w"]);
        assert_eq!(w(r#"s "line\n""#), ["s", "line\n"]);
        assert!(
            split_line("a \"b", &env)
                .unwrap_err()
                .contains("unmatched quote")
        );
        assert!(
            split_line("a 'b", &env)
                .unwrap_err()
                .contains("unmatched quote")
        );
    }

    #[test]
    fn variables() {
        assert_eq!(w(r#"bind "127.0.0.1:${PORT}""#), ["bind", "127.0.0.1:8080"]);
        assert_eq!(w("bind :$PORT"), ["bind", ":8080"]);
        assert_eq!(w(r#"x "${NOPE-9000}" ${NOPE-d}"#), ["x", "9000", "d"]);
        assert_eq!(w("x '${PORT}'"), ["x", "${PORT}"]);
        assert_eq!(w(r#"x "\$PORT""#), ["x", "$PORT"]);
        // Outside double quotes `\$` is no escape (HAProxy's parse_line): the backslash
        // stays and the variable is expanded.
        assert_eq!(w(r"x \$PORT"), ["x", "\\8080"]);
        assert_eq!(w("x ${lower_name}"), ["x", "low"]);
        // An unquoted variable that expands to nothing leaves no word; a quoted one leaves "".
        assert_eq!(w("x $NOPE y"), ["x", "y"]);
        assert_eq!(w(r#"x "$NOPE" y"#), ["x", "", "y"]);
        assert_eq!(w("cost 5$"), ["cost", "5$"]);
        assert!(split_line(r#"x "${PORT""#, &env).is_err());
        assert!(split_line(r#"x "${PORT:-1}""#, &env).is_err());
    }

    /// Outside double quotes, a reference sluice cannot read stays as written (HAProxy
    /// expands nothing there), with a warning on its line.
    #[test]
    fn unreadable_unquoted_references_stay_as_written() {
        let mut ov = EnvOverlay::default();
        let (lines, errs) = tokenize_with(
            "a.cfg",
            "stats auth admin:${PASS:-changeme}
x ${PORT
y $PORT
",
            &env,
            &mut ov,
        );
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(lines[0].words, ["stats", "auth", "admin:${PASS:-changeme}"]);
        assert_eq!(lines[0].warnings.len(), 1);
        assert!(
            lines[0].warnings[0].contains("'${PASS:-changeme}' is kept as written"),
            "{:?}",
            lines[0].warnings
        );
        assert_eq!(lines[1].words, ["x", "${PORT"]);
        assert_eq!(lines[1].warnings.len(), 1);
        assert_eq!(lines[2].words, ["y", "8080"]);
        assert!(lines[2].warnings.is_empty());
    }

    #[test]
    fn conditions() {
        let t = |s: &str| eval_condition(s, &env).unwrap();
        assert!(t("defined(PORT)"));
        assert!(!t("defined(NOPE)"));
        assert!(t("streq($PORT,8080)"));
        assert!(t(r#"strneq("${PORT}",80)"#));
        assert!(t("version_atleast(2.4) && version_before(2.10)"));
        assert!(!t("version_atleast(2.7)"));
        assert!(t("feature(THREAD)"));
        assert!(t("feature(OPENSSL)") && t("feature(ZLIB)"));
        assert!(!t("feature(LUA)"));
        assert!(t("!defined(NOPE) && (0 || 1)"));
        assert!(!t("0"));
        assert!(
            eval_condition("bogus(1)", &env)
                .unwrap_err()
                .contains("unknown function")
        );
        assert!(eval_condition("defined(A", &env).is_err());
    }

    #[test]
    fn if_blocks() {
        let text = "a\n.if defined(PORT)\n b\n.if defined(NOPE)\n  c\n.elif 1\n  d\n.else\n  e\n.endif\n.else\n f\n.endif\ng\n";
        let (lines, errs) = tokenize("t.cfg", text, &env);
        assert!(errs.is_empty(), "{errs:?}");
        let got: Vec<(usize, String)> =
            lines.iter().map(|l| (l.line, l.words[0].clone())).collect();
        assert_eq!(
            got,
            [
                (1, "a".into()),
                (3, "b".into()),
                (7, "d".into()),
                (14, "g".into())
            ]
        );
        let (_, errs) = tokenize("t.cfg", ".if 1\nx\n", &env);
        assert_eq!(
            errs[0].to_string(),
            "t.cfg:1: '.if' block is not closed (missing '.endif')"
        );
        let (_, errs) = tokenize("t.cfg", "x\n.endif\n.alert stop here\n", &env);
        assert_eq!(
            errs[0].to_string(),
            "t.cfg:2: '.endif' without a matching '.if'"
        );
        assert_eq!(errs[1].to_string(), "t.cfg:3: stop here");
        // Errors inside inactive blocks are not reported.
        let (_, errs) = tokenize("t.cfg", ".if 0\nx \"unterminated\n.endif\n", &env);
        assert!(errs.is_empty());
    }

    /// Quotes a word so the tokenizer gives it back unchanged.
    fn quote(word: &str) -> String {
        let mut s = String::from("'");
        for c in word.chars() {
            if c == '\'' {
                s.push_str("'\\''");
            } else {
                s.push(c);
            }
        }
        s.push('\'');
        s
    }

    proptest! {
        #[test]
        fn quoted_words_round_trip(words in proptest::collection::vec("[ -~]{0,12}", 0..8)) {
            let line = words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ");
            prop_assert_eq!(split_line(&line, &env).unwrap(), words);
        }

        #[test]
        fn plain_words_round_trip(words in proptest::collection::vec("[a-zA-Z0-9_.:/@-]{1,12}", 0..8), sep in "[ \t]{1,3}") {
            let line = words.join(&sep);
            prop_assert_eq!(split_line(&line, &env).unwrap(), words);
        }

        #[test]
        fn garbage_never_panics(s in "\\PC{0,64}") {
            let _ = split_line(&s, &env);
            let _ = tokenize("g.cfg", &s, &env);
            let _ = eval_condition(&s, &env);
        }
    }
}
