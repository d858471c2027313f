//! What the docs test reads in a Markdown file: its fenced blocks, and the shell commands in a
//! block, one logical command at a time (a `\` continuation, a multi-line array or a quoted
//! newline stays inside its command), each with the comments written beside it.

/// A fenced block: ```` ```INFO ```` … ```` ``` ````.
#[derive(Debug, Clone)]
pub struct Block {
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The info string, trimmed: `sh`, `console`, `text`, `text illustration`, `toml`, or empty.
    pub info: String,
    /// The lines between the fences, each ending in a newline.
    pub body: String,
    /// Only blank lines separate this block from the one before it: an output block shown
    /// right after its command block.
    pub follows_block: bool,
    /// The paragraph right before it (its lines joined by spaces), where a doc says what to
    /// wait for before running it.
    pub intro: String,
}

/// Every fenced block of TEXT, in order.
pub fn blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    let mut only_blank_since_block = false;
    // The paragraph being read, and the last one ended by a blank line.
    let (mut paragraph, mut last_paragraph): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        if let Some(block) = open.as_mut() {
            if line.trim_end() == "```" {
                blocks.push(open.take().expect("a block is open"));
                only_blank_since_block = true;
                last_paragraph.clear();
            } else {
                block.body.push_str(line);
                block.body.push('\n');
            }
        } else if let Some(info) = line.strip_prefix("```") {
            open = Some(Block {
                line: i + 1,
                info: info.trim().to_string(),
                body: String::new(),
                follows_block: only_blank_since_block,
                intro: if paragraph.is_empty() {
                    std::mem::take(&mut last_paragraph).join(" ")
                } else {
                    std::mem::take(&mut paragraph).join(" ")
                },
            });
        } else if line.trim().is_empty() {
            if !paragraph.is_empty() {
                last_paragraph = std::mem::take(&mut paragraph);
            }
        } else {
            only_blank_since_block = false;
            paragraph.push(line.trim());
        }
    }
    assert!(open.is_none(), "a fenced block is never closed");
    blocks
}

/// One command as the shell reads it, with the comments written on its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logical {
    /// The command as written, comments included (what a reader pastes).
    pub text: String,
    /// The command without its comments, continuations joined, spaces collapsed: what the
    /// skip list and the classification read. Empty for a line that is only a comment.
    pub code: String,
    /// The comments on its lines, without the `#`, trimmed.
    pub comments: Vec<String>,
    /// 0-based line within the block where it starts.
    pub line: usize,
}

/// Splits a shell script into logical commands: a newline ends one only outside quotes,
/// parentheses (`$( … )`, an array) and a `\` continuation.
pub fn logical_commands(script: &str) -> Vec<Logical> {
    #[derive(Clone, Copy, PartialEq)]
    enum Frame {
        Paren,
        Double,
    }
    let chars: Vec<char> = script.chars().collect();
    let mut commands = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let (mut text, mut code, mut comments) = (String::new(), String::new(), Vec::new());
    let (mut line, mut start_line) = (0, 0);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let in_double = stack.last() == Some(&Frame::Double);
        match c {
            '\\' if i + 1 < chars.len() => {
                text.push(c);
                text.push(chars[i + 1]);
                if chars[i + 1] == '\n' {
                    line += 1;
                    code.push(' ');
                } else {
                    code.push(c);
                    code.push(chars[i + 1]);
                }
                i += 2;
                continue;
            }
            '\'' if !in_double => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map_or(chars.len(), |p| i + 1 + p);
                let quoted: String = chars[i..=end.min(chars.len() - 1)].iter().collect();
                line += quoted.matches('\n').count();
                text.push_str(&quoted);
                code.push_str(&quoted);
                i = end + 1;
                continue;
            }
            '"' if in_double => {
                stack.pop();
            }
            '"' => stack.push(Frame::Double),
            '$' if chars.get(i + 1) == Some(&'(') => {
                stack.push(Frame::Paren);
                text.push_str("$(");
                code.push_str("$(");
                i += 2;
                continue;
            }
            '(' if !in_double => stack.push(Frame::Paren),
            ')' if stack.last() == Some(&Frame::Paren) => {
                stack.pop();
            }
            '#' if !in_double && code.chars().last().is_none_or(char::is_whitespace) => {
                let end = chars[i..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(chars.len(), |p| i + p);
                let comment: String = chars[i..end].iter().collect();
                text.push_str(&comment);
                comments.push(comment.trim_start_matches('#').trim().to_string());
                i = end;
                continue;
            }
            '\n' => {
                line += 1;
                if stack.is_empty() {
                    let collapsed = code.split_whitespace().collect::<Vec<_>>().join(" ");
                    if !collapsed.is_empty() || !comments.is_empty() {
                        commands.push(Logical {
                            text: std::mem::take(&mut text),
                            code: collapsed,
                            comments: std::mem::take(&mut comments),
                            line: start_line,
                        });
                    }
                    text.clear();
                    code.clear();
                    start_line = line;
                    i += 1;
                    continue;
                }
            }
            _ => {}
        }
        text.push(c);
        code.push(c);
        i += 1;
    }
    assert!(
        stack.is_empty() && text.trim().is_empty(),
        "a quote or a parenthesis is never closed in:\n{script}"
    );
    commands
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_arrays_and_quotes_stay_in_one_command() {
        let script = "A=1; echo \"$A\"   # say it (exits 0)\n\
                      curl -s x \\\n  | jq -c '.a # not a comment'\n\
                      POST=(-H 'a'\n      -H \"b: $(cat f | cut -d' ' -f2)\")\n\
                      # in T3\n";
        let commands = logical_commands(script);
        let codes: Vec<&str> = commands.iter().map(|c| c.code.as_str()).collect();
        assert_eq!(
            codes,
            [
                "A=1; echo \"$A\"",
                "curl -s x | jq -c '.a # not a comment'",
                "POST=(-H 'a' -H \"b: $(cat f | cut -d' ' -f2)\")",
                "",
            ]
        );
        assert_eq!(commands[0].comments, ["say it (exits 0)"]);
        assert_eq!(commands[3].comments, ["in T3"]);
        assert_eq!(
            commands.iter().map(|c| c.line).collect::<Vec<_>>(),
            [0, 1, 3, 5]
        );
    }

    #[test]
    fn a_hash_inside_a_word_is_not_a_comment() {
        let commands = logical_commands("S=${LAST%%-*}; KEY=${LAST#*.}   # the key\n");
        assert_eq!(commands[0].code, "S=${LAST%%-*}; KEY=${LAST#*.}");
        assert_eq!(commands[0].comments, ["the key"]);
    }

    #[test]
    fn an_output_block_right_after_its_command_block_follows_it() {
        let doc = "Run:\n\n```sh\nforkscope demo\n```\n\n```text\nout\n```\n\nOld.\n\nNew\nprose:\n\n```text\nx\n```\n";
        let found = blocks(doc);
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].intro, "Run:");
        assert_eq!(found[1].intro, "");
        assert_eq!(found[2].intro, "New prose:");
        assert!(!found[0].follows_block);
        assert!(found[1].follows_block);
        assert!(!found[2].follows_block);
        assert_eq!(found[1].body, "out\n");
        assert_eq!(found[1].line, 7);
    }
}
