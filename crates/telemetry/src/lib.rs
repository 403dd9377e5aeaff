//! Traces. The engine's spans follow OpenTelemetry's GenAI conventions (`invoke_agent` per
//! execution, `chat` per model call, `execute_tool` per tool call, with `gen_ai.*` attributes);
//! this crate turns them into OpenTelemetry spans and exports them over OTLP (HTTP, protobuf)
//! when an endpoint is configured the standard way — `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, with `OTEL_EXPORTER_OTLP_HEADERS` and
//! `OTEL_SERVICE_NAME` honoured — and does nothing at all otherwise (no layer, no thread).
//!
//! Spans are batched on a thread of their own; [`Traces::flush`] sends what is pending (a Lambda
//! function calls it before its invocation ends, since a frozen container sends nothing) and
//! [`Traces::shutdown`] flushes and stops at exit.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The variables that turn export on.
const ENDPOINT_VARIABLES: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

/// An OpenTelemetry tracer provider and the `tracing` layer that feeds it.
#[derive(Debug, Clone)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Export over OTLP/HTTP when the environment names an endpoint (`lookup` reads a variable);
    /// `None` when it names none. `service` is the default `service.name` (`OTEL_SERVICE_NAME`
    /// wins).
    pub fn from_env(service: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        let set = |name: &str| lookup(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        // The traces endpoint is used as given; the general one gets the signal's path, as the
        // OTLP specification says.
        let endpoint = match (set(ENDPOINT_VARIABLES[0]), set(ENDPOINT_VARIABLES[1])) {
            (Some(traces), _) => traces,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .build()
            .map_err(|e| format!("OTLP trace exporter: {e}"))?;
        let service =
            lookup("OTEL_SERVICE_NAME").filter(|s| !s.trim().is_empty()).unwrap_or_else(|| service.to_owned());
        Ok(Some(Self::batched(exporter, service)))
    }

    /// Spans batched to `exporter` (what `from_env` builds; tests give their own exporter).
    pub fn batched(exporter: impl SpanExporter + 'static, service: String) -> Self {
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build();
        Self { provider }
    }

    /// Every span handed to `exporter` as it ends (tests).
    pub fn simple(exporter: impl SpanExporter + 'static, service: String) -> Self {
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build();
        Self { provider }
    }

    /// The layer that turns `tracing` spans into OpenTelemetry spans (`otel.name`, `otel.kind`
    /// and `otel.status_code` fields name, kind and status them; other fields are attributes).
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("switchboard")).with_tracked_inactivity(false)
    }

    /// Sends the spans that are waiting; errors are logged, never raised (traces are best effort).
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!(error = %e, "traces not flushed");
        }
    }

    /// Flushes and stops the exporter.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "traces not shut down cleanly");
        }
    }
}
