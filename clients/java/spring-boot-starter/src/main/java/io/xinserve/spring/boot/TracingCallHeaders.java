package io.xinserve.spring.boot;

import io.micrometer.tracing.TraceContext;
import io.micrometer.tracing.Tracer;
import io.micrometer.tracing.propagation.Propagator;
import java.util.HashMap;
import java.util.Map;
import org.springframework.beans.factory.ObjectProvider;

/**
 * Propagates the current Micrometer Tracing span to the server (W3C {@code traceparent}, and
 * whatever else the configured {@link Propagator} writes, e.g. {@code tracestate} or baggage).
 */
public class TracingCallHeaders implements XinserveCallHeaders {
  private final ObjectProvider<Tracer> tracer;
  private final ObjectProvider<Propagator> propagator;

  /**
   * @param tracer the tracer, if the application has one
   * @param propagator the propagator, if the application has one
   */
  public TracingCallHeaders(ObjectProvider<Tracer> tracer, ObjectProvider<Propagator> propagator) {
    this.tracer = tracer;
    this.propagator = propagator;
  }

  @Override
  public Map<String, String> headers() {
    Tracer t = tracer.getIfAvailable();
    Propagator p = propagator.getIfAvailable();
    if (t == null || p == null) {
      return Map.of();
    }
    TraceContext ctx = t.currentTraceContext().context();
    if (ctx == null) {
      return Map.of();
    }
    Map<String, String> out = new HashMap<>();
    p.inject(ctx, out, Map::put);
    return out;
  }
}
