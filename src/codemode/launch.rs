//! Starting the code-mode child in a session's environment and driving it.
//!
//! The environment offers only the primitive: [`Environment::spawn`] with
//! piped stdio, in the session's workspace and sandbox, and the interpreter it
//! has ([`Environment::python`]). Code mode owns the rest: the child's argv,
//! the protocol ([`super::runner`]) and killing the whole process tree when the
//! run ends, however it ends. So `environment/` knows nothing of code mode,
//! and a new environment (a container, a remote sandbox) gets `run_code` by
//! implementing `spawn`.

use super::runner::{self, CallTool, ChildIo, CodeError, OutputSink};
use crate::environment::{Environment, Program, SpawnOptions};
use async_trait::async_trait;
use std::time::Duration;

/// `run_code` on any environment: `environment.run_code(..)` with this trait in scope.
#[async_trait]
pub trait RunCode {
    /// Runs Python `code` whose `tools.<name>` calls go to `call_tool`;
    /// returns what it printed (also pushed to `write` as it arrives).
    async fn run_code(
        &self,
        code: &str,
        tools: &[String],
        call_tool: CallTool,
        write: OutputSink,
        timeout: Duration,
    ) -> Result<String, CodeError>;
}

#[async_trait]
impl<E: Environment + ?Sized> RunCode for E {
    async fn run_code(
        &self,
        code: &str,
        tools: &[String],
        call_tool: CallTool,
        write: OutputSink,
        timeout: Duration,
    ) -> Result<String, CodeError> {
        let crashed = |stderr: String| CodeError::Crashed { exit_code: None, stderr, output: String::new() };
        let argv = runner::child_argv(self.python());
        let mut process =
            self.spawn(Program::Argv(argv), SpawnOptions::default()).await.map_err(|e| crashed(e.to_string()))?;
        let io = process.take_io();
        let (Some(stdin), Some(stdout), Some(stderr)) = (io.stdin, io.stdout, io.stderr) else {
            process.signal(true);
            return Err(crashed("the environment gave the runner no pipes".into()));
        };
        let control = process.control();
        let exited = async move { process.wait().await.ok() };
        let result =
            runner::run_code(ChildIo { stdin, stdout, stderr }, code, tools, call_tool, write, timeout, exited).await;
        control.signal(true);
        result
    }
}
