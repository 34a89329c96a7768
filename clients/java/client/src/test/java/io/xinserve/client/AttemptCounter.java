package io.xinserve.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientStreamTracer;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Counts the attempts gRPC makes for the calls through it, retries included: gRPC creates one
 * stream tracer per attempt, also for an attempt that fails before it reaches a transport. Shared
 * with the integration tests through this module's test jar.
 */
public final class AttemptCounter implements ClientInterceptor {
  private final AtomicInteger attempts = new AtomicInteger();

  /** @return the attempts made so far */
  public int attempts() {
    return attempts.get();
  }

  @Override
  public <Q, R> ClientCall<Q, R> interceptCall(
      MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
    return next.newCall(
        method,
        options.withStreamTracerFactory(
            new ClientStreamTracer.Factory() {
              @Override
              public ClientStreamTracer newClientStreamTracer(
                  ClientStreamTracer.StreamInfo info, Metadata headers) {
                attempts.incrementAndGet();
                return new ClientStreamTracer() {};
              }
            }));
  }
}
