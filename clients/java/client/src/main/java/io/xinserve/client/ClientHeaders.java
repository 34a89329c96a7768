package io.xinserve.client;

import io.grpc.CallCredentials;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.Executor;
import java.util.function.Supplier;

/** Per-call headers: x-request-id, caller-supplied headers (traceparent ...) and the bearer token. */
final class ClientHeaders {
  static final Metadata.Key<String> REQUEST_ID =
      Metadata.Key.of("x-request-id", Metadata.ASCII_STRING_MARSHALLER);
  static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
  static final CallOptions.Key<String> REQUEST_ID_OPTION =
      CallOptions.Key.create("xinserve.request-id");

  private ClientHeaders() {}

  static String newRequestId() {
    return UUID.randomUUID().toString();
  }

  /**
   * Adds x-request-id (from the call options) and the extra headers to every call. A header an
   * outer interceptor already set (e.g. the traceparent of a Micrometer Observation's client span)
   * is kept.
   */
  static final class Interceptor implements ClientInterceptor {
    private final Supplier<Map<String, String>> extra;

    Interceptor(Supplier<Map<String, String>> extra) {
      this.extra = extra;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(
        MethodDescriptor<Q, R> method, CallOptions callOptions, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, callOptions)) {
        @Override
        public void start(Listener<R> responseListener, Metadata headers) {
          String rid = callOptions.getOption(REQUEST_ID_OPTION);
          if (!headers.containsKey(REQUEST_ID)) {
            headers.put(REQUEST_ID, rid != null ? rid : newRequestId());
          }
          if (extra != null) {
            Map<String, String> more;
            try {
              more = extra.get();
            } catch (RuntimeException e) {
              more = null; // tracing must never break a call
            }
            if (more != null) {
              for (Map.Entry<String, String> e : more.entrySet()) {
                if (e.getKey() != null && e.getValue() != null) {
                  Metadata.Key<String> k =
                      Metadata.Key.of(e.getKey().toLowerCase(java.util.Locale.ROOT),
                          Metadata.ASCII_STRING_MARSHALLER);
                  if (!headers.containsKey(k)) {
                    headers.put(k, e.getValue());
                  }
                }
              }
            }
          }
          super.start(responseListener, headers);
        }
      };
    }
  }

  /** {@code authorization: Bearer <token>} from a supplier called for every call. */
  static final class Bearer extends CallCredentials {
    private final Supplier<String> tokens;

    Bearer(Supplier<String> tokens) {
      this.tokens = tokens;
    }

    @Override
    public void applyRequestMetadata(RequestInfo info, Executor appExecutor, MetadataApplier applier) {
      appExecutor.execute(
          () -> {
            String token;
            try {
              token = tokens.get();
            } catch (RuntimeException e) {
              applier.fail(
                  Status.UNAUTHENTICATED.withDescription("bearer token supplier failed").withCause(e));
              return;
            }
            Metadata md = new Metadata();
            if (token != null && !token.isBlank()) {
              md.put(AUTHORIZATION, "Bearer " + token.strip());
            }
            applier.apply(md);
          });
    }
  }
}
