package io.xinserve.spring.boot;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.xinserve.v1.ChatResponse;
import io.xinserve.v1.ChatStreamResponse;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GenerateStreamResponse;
import java.util.concurrent.TimeUnit;

/**
 * Records Micrometer meters for every call of one client. Meters (tags {@code client}, {@code
 * method}, {@code model}: the request's model, {@code none} for calls without one):
 *
 * <ul>
 *   <li>{@code xinserve.client.calls} timer, also tagged {@code status} (gRPC code): calls by
 *       method and status, and their duration;
 *   <li>{@code xinserve.client.time.to.first.token} timer, streams only: time from the call's start
 *       to its first message;
 *   <li>{@code xinserve.client.tokens} counter: generated tokens received;
 *   <li>{@code xinserve.client.tokens.per.second} summary, streams only: generated tokens / the
 *       stream's duration in seconds;
 *   <li>{@code xinserve.client.cancellations} counter: calls ended with CANCELLED.
 * </ul>
 *
 * <p>The {@code model} tag has bounded cardinality, whatever strings callers send: a model name
 * becomes a tag value only once the server accepted it (a call with it delivered a message or
 * ended OK), and at most {@value #MAX_MODEL_TAGS} names per client do; any other name (an unknown
 * model refused with NOT_FOUND, or names beyond the limit) is tagged {@code other}.
 */
public class XinserveMetricsInterceptor implements ClientInterceptor {
  /** The most model names one client's meters are tagged with; further names are {@code other}. */
  public static final int MAX_MODEL_TAGS = 64;

  private final MeterRegistry registry;
  private final String client;
  private final java.util.Set<String> acceptedModels = java.util.concurrent.ConcurrentHashMap.newKeySet();

  /**
   * @param registry where meters go
   * @param client the client name used as the {@code client} tag
   */
  public XinserveMetricsInterceptor(MeterRegistry registry, String client) {
    this.registry = registry;
    this.client = client;
  }

  @Override
  public <Q, R> ClientCall<Q, R> interceptCall(
      MethodDescriptor<Q, R> method, CallOptions callOptions, Channel next) {
    String name = method.getServiceName() + "/" + method.getBareMethodName();
    boolean streaming = method.getType() == MethodDescriptor.MethodType.SERVER_STREAMING;
    return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, callOptions)) {
      private volatile String requested = "none";

      @Override
      public void sendMessage(Q message) {
        String m = modelOf(message);
        if (m != null && !m.isEmpty()) {
          requested = m;
        }
        super.sendMessage(message);
      }

      @Override
      public void start(Listener<R> listener, Metadata headers) {
        long start = System.nanoTime();
        super.start(
            new ForwardingClientCallListener.SimpleForwardingClientCallListener<>(listener) {
              private long first;
              private long tokens;

              @Override
              public void onMessage(R message) {
                accept(requested);
                String model = tag(requested);
                if (first == 0) {
                  first = System.nanoTime();
                  if (streaming) {
                    Timer.builder("xinserve.client.time.to.first.token")
                        .description("Time from the start of a stream to its first message")
                        .tags("client", client, "method", name, "model", model)
                        .register(registry)
                        .record(first - start, TimeUnit.NANOSECONDS);
                  }
                }
                tokens += tokens(message);
                super.onMessage(message);
              }

              @Override
              public void onClose(Status status, Metadata trailers) {
                long end = System.nanoTime();
                try {
                  if (status.isOk()) {
                    accept(requested);
                  }
                  String model = tag(requested);
                  Timer.builder("xinserve.client.calls")
                      .description("xinserve calls by method and status")
                      .tags("client", client, "method", name, "model", model, "status", status.getCode().name())
                      .register(registry)
                      .record(end - start, TimeUnit.NANOSECONDS);
                  if (tokens > 0) {
                    Counter.builder("xinserve.client.tokens")
                        .description("Generated tokens received")
                        .baseUnit("tokens")
                        .tags("client", client, "method", name, "model", model)
                        .register(registry)
                        .increment(tokens);
                    if (streaming && end > start) {
                      DistributionSummary.builder("xinserve.client.tokens.per.second")
                          .description("Generated tokens per second of a stream")
                          .baseUnit("tokens/s")
                          .tags("client", client, "method", name, "model", model)
                          .register(registry)
                          .record(tokens / ((end - start) / 1e9));
                    }
                  }
                  if (status.getCode() == Status.Code.CANCELLED) {
                    Counter.builder("xinserve.client.cancellations")
                        .description("Calls ended by cancellation")
                        .tags("client", client, "method", name, "model", model)
                        .register(registry)
                        .increment();
                  }
                } catch (RuntimeException ignored) {
                  // metrics never break a call
                }
                super.onClose(status, trailers);
              }
            },
            headers);
      }
    };
  }

  private void accept(String model) {
    if (!"none".equals(model) && acceptedModels.size() < MAX_MODEL_TAGS) {
      acceptedModels.add(model);
    }
  }

  private String tag(String model) {
    return "none".equals(model) || acceptedModels.contains(model) ? model : "other";
  }

  private static String modelOf(Object message) {
    if (message instanceof io.xinserve.v1.GenerateRequest r) {
      return r.getModel();
    }
    if (message instanceof io.xinserve.v1.ChatRequest r) {
      return r.getModel();
    }
    if (message instanceof io.xinserve.v1.EmbedRequest r) {
      return r.getModel();
    }
    if (message instanceof io.xinserve.v1.TokenizeRequest r) {
      return r.getModel();
    }
    return null;
  }

  private static long tokens(Object message) {
    if (message instanceof GenerateStreamResponse g) {
      return g.getTokenIdsCount();
    }
    if (message instanceof ChatStreamResponse c) {
      return c.getTokenIdsCount();
    }
    if (message instanceof GenerateResponse g) {
      return g.getUsage().getCompletionTokens();
    }
    if (message instanceof ChatResponse c) {
      return c.getUsage().getCompletionTokens();
    }
    return 0;
  }
}
