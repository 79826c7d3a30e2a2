//! `demo.echo`: waits `delayMs` (stopping at once when told to), then
//! returns `message`. Useful to try timeouts, skips and retries.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{Handler, HandlerFuture};
use crate::context::RunContext;

pub struct Echo;

impl Handler for Echo {
    fn run(&self, params: Map<String, Value>, mut ctx: RunContext) -> HandlerFuture {
        Box::pin(async move {
            let message = params
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("hello")
                .to_string();
            let delay = params.get("delayMs").and_then(Value::as_u64).unwrap_or(0);
            if delay > 0 {
                ctx.log.line(format!("waiting {delay} ms"));
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(delay)) => {}
                    reason = ctx.stop.stopped() => {
                        return Err(format!("stopped before the delay ended ({reason:?})"));
                    }
                }
            }
            Ok(message)
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::context::{LogSink, StopReason, stop_pair};

    fn ctx() -> (crate::context::Stopper, RunContext) {
        let (stopper, stop) = stop_pair();
        (
            stopper,
            RunContext {
                job_id: 1,
                job_name: "echo".into(),
                fire_id: 1,
                attempt: 1,
                deadline: None,
                stop,
                log: LogSink::default(),
            },
        )
    }

    #[tokio::test(start_paused = true)]
    async fn echoes_after_the_delay() {
        let (_stopper, ctx) = ctx();
        let params = json!({"message": "hi", "delayMs": 5000});
        let Value::Object(params) = params else {
            unreachable!()
        };
        let started = tokio::time::Instant::now();
        assert_eq!(Echo.run(params, ctx).await, Ok("hi".to_string()));
        assert_eq!(started.elapsed(), Duration::from_millis(5000));
    }

    #[tokio::test(start_paused = true)]
    async fn stops_when_told() {
        let (stopper, ctx) = ctx();
        let Value::Object(params) = json!({"delayMs": 600000}) else {
            unreachable!()
        };
        let run = tokio::spawn(Echo.run(params, ctx));
        tokio::time::sleep(Duration::from_millis(10)).await;
        stopper.stop(StopReason::Timeout);
        let result = run.await.expect("join");
        assert!(result.is_err_and(|e| e.contains("Timeout")));
    }
}
