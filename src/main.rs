//! forkscope: watch an MCP Streamable HTTP session fork, and watch a fenced resume prevent it.

mod demo;

fn main() {
    print!("{}", demo::run());
}
