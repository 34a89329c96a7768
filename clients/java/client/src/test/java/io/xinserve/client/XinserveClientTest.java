package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.google.protobuf.Any;
import com.google.rpc.BadRequest;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Context;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import io.xinserve.client.errors.CancelledException;
import io.xinserve.client.errors.DeadlineExceededException;
import io.xinserve.client.errors.FailedPreconditionException;
import io.xinserve.client.errors.FieldViolation;
import io.xinserve.client.errors.InvalidArgumentException;
import io.xinserve.client.errors.NotFoundException;
import io.xinserve.client.errors.PermissionDeniedException;
import io.xinserve.client.errors.ResourceExhaustedException;
import io.xinserve.client.errors.UnauthenticatedException;
import io.xinserve.client.errors.UnavailableException;
import io.xinserve.client.errors.XinserveException;
import io.xinserve.v1.CompletionOutput;
import io.xinserve.v1.FinishReason;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.InferenceServiceGrpc;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import reactor.core.publisher.Flux;
import reactor.test.StepVerifier;

@Timeout(30)
class XinserveClientTest {
  private static final Metadata.Key<String> AUTH =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
  private static final Metadata.Key<String> RID =
      Metadata.Key.of("x-request-id", Metadata.ASCII_STRING_MARSHALLER);
  private static final Metadata.Key<String> TRACEPARENT =
      Metadata.Key.of("traceparent", Metadata.ASCII_STRING_MARSHALLER);

  private FakeServer server;
  private XinserveClient client;

  /** A servicer whose behaviour each test sets. */
  static class Service extends InferenceServiceGrpc.InferenceServiceImplBase {
    final CountDownLatch cancelled = new CountDownLatch(1);
    final AtomicInteger sent = new AtomicInteger();
    volatile Status unaryFailure;
    volatile int failFirstUnary;
    volatile int streamLength = 5;
    volatile long unaryDelayMs;
    volatile boolean failStreamBeforeFirst;
    volatile boolean failStreamAfterFirst;
    volatile boolean endless;

    @Override
    public void generate(GenerateRequest request, StreamObserver<GenerateResponse> out) {
      Context.current().addListener(c -> cancelled.countDown(), Runnable::run);
      if (failFirstUnary > 0) {
        failFirstUnary--;
        out.onError(Status.UNAVAILABLE.withDescription("draining").asRuntimeException());
        return;
      }
      if (unaryFailure != null) {
        out.onError(unaryFailure.asRuntimeException());
        return;
      }
      if (unaryDelayMs > 0) {
        try {
          Thread.sleep(unaryDelayMs);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        if (Context.current().isCancelled()) {
          return;
        }
      }
      out.onNext(
          GenerateResponse.newBuilder()
              .setRequestId(request.getRequestId())
              .addOutputs(
                  CompletionOutput.newBuilder()
                      .setText("echo:" + request.getPrompt())
                      .setFinishReason(FinishReason.FINISH_REASON_LENGTH))
              .build());
      out.onCompleted();
    }

    @Override
    public void generateStream(
        GenerateRequest request, StreamObserver<GenerateStreamResponse> observer) {
      ServerCallStreamObserver<GenerateStreamResponse> out =
          (ServerCallStreamObserver<GenerateStreamResponse>) observer;
      out.setOnCancelHandler(cancelled::countDown);
      if (failStreamBeforeFirst && failFirstUnary-- > 0) {
        out.onError(Status.UNAVAILABLE.withDescription("starting").asRuntimeException());
        return;
      }
      if (failStreamAfterFirst) {
        out.onNext(delta(0));
        sent.incrementAndGet();
        out.onError(Status.UNAVAILABLE.withDescription("engine died").asRuntimeException());
        return;
      }
      if (endless) {
        // honours flow control: only sends while the client has asked for more
        out.setOnReadyHandler(
            () -> {
              while (out.isReady() && !out.isCancelled()) {
                out.onNext(delta(sent.getAndIncrement()));
              }
            });
        return;
      }
      new Thread(
              () -> {
                for (int i = 0; i < streamLength && !out.isCancelled(); i++) {
                  out.onNext(delta(i));
                  sent.incrementAndGet();
                  try {
                    Thread.sleep(5);
                  } catch (InterruptedException e) {
                    return;
                  }
                }
                if (!out.isCancelled()) {
                  out.onCompleted();
                }
              })
          .start();
    }

    static GenerateStreamResponse delta(int i) {
      return GenerateStreamResponse.newBuilder().setText("t" + i).addTokenIds(i).build();
    }
  }

  private Service service;

  private void start(Service s, XinserveClient.Builder customize) throws Exception {
    service = s;
    server = new FakeServer(s);
    client = customize.channelBuilder(server.channelBuilder()).build();
  }

  private void start(Service s) throws Exception {
    start(s, XinserveClient.builder());
  }

  @AfterEach
  void tearDown() throws Exception {
    if (client != null) {
      client.close();
    }
    if (server != null) {
      server.close();
    }
  }

  private static GenerateRequest req(String prompt) {
    return GenerateRequest.newBuilder().setModel("m").setPrompt(prompt).build();
  }

  // ------------------------------------------------------------------ metadata

  @Test
  void sendsBearerTokenRequestIdAndTraceparent() throws Exception {
    AtomicInteger n = new AtomicInteger();
    start(
        new Service(),
        XinserveClient.builder()
            .bearerToken(() -> "tok-" + n.incrementAndGet())
            .headers(() -> Map.of("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")));

    assertThat(client.generate(req("a")).getOutputs(0).getText()).isEqualTo("echo:a");
    Metadata md = server.lastHeaders();
    assertThat(md.get(AUTH)).isEqualTo("Bearer tok-1");
    assertThat(md.get(RID)).matches("[0-9a-f-]{36}");
    assertThat(md.get(TRACEPARENT)).startsWith("00-0af7651916cd43dd8448eb211c80319c-");

    // the supplier is asked again for every call: a refreshed token is used at once
    client.generate(req("b").toBuilder().setRequestId("my-id-1").build());
    md = server.lastHeaders();
    assertThat(md.get(AUTH)).isEqualTo("Bearer tok-2");
    assertThat(md.get(RID)).isEqualTo("my-id-1");
  }

  @Test
  void streamCarriesRequestIdAndItIsExposed() throws Exception {
    start(new Service());
    try (ResponseStream<GenerateStreamResponse> s = client.generateStream(req("x"))) {
      assertThat(s.stream().count()).isEqualTo(5);
      assertThat(server.lastHeaders().get(RID)).isEqualTo(s.requestId());
    }
  }

  @Test
  void failingTokenSupplierFailsTheCallUnauthenticated() throws Exception {
    start(
        new Service(),
        XinserveClient.builder()
            .bearerToken(
                () -> {
                  throw new IllegalStateException("vault down");
                }));
    assertThatThrownBy(() -> client.generate(req("a"))).isInstanceOf(UnauthenticatedException.class);
    assertThat(server.attempts("Generate")).isZero();
  }

  // ------------------------------------------------------------------ errors

  /** Starts a servicer whose Generate fails with this rich status (google.rpc details in trailers). */
  private XinserveException failWith(com.google.rpc.Status rich) throws Exception {
    Service rs =
        new Service() {
          @Override
          public void generate(GenerateRequest request, StreamObserver<GenerateResponse> out) {
            out.onError(StatusProto.toStatusRuntimeException(rich));
          }
        };
    start(rs, XinserveClient.builder().retryPolicy(RetryPolicy.none()));
    try {
      client.generate(req("a"));
    } catch (XinserveException e) {
      return e;
    }
    throw new AssertionError("no exception");
  }

  @Test
  void invalidArgumentCarriesEveryFieldViolation() throws Exception {
    XinserveException e =
        failWith(
            com.google.rpc.Status.newBuilder()
                .setCode(Code.INVALID_ARGUMENT_VALUE)
                .setMessage("invalid request")
                .addDetails(
                    Any.pack(
                        BadRequest.newBuilder()
                            .addFieldViolations(
                                BadRequest.FieldViolation.newBuilder()
                                    .setField("sampling_params.top_p")
                                    .setDescription("must be in (0, 1]"))
                            .addFieldViolations(
                                BadRequest.FieldViolation.newBuilder()
                                    .setField("sampling_params.temperature")
                                    .setDescription("must be >= 0"))
                            .build()))
                .addDetails(
                    Any.pack(ErrorInfo.newBuilder().setReason("INVALID_SAMPLING").setDomain("xinserve.io").build()))
                .build());
    assertThat(e).isInstanceOf(InvalidArgumentException.class);
    InvalidArgumentException ia = (InvalidArgumentException) e;
    assertThat(ia.fieldViolations()).extracting(FieldViolation::field)
        .containsExactly("sampling_params.top_p", "sampling_params.temperature");
    assertThat(ia.fieldViolation("sampling_params.top_p")).get()
        .extracting(FieldViolation::description).isEqualTo("must be in (0, 1]");
    assertThat(ia.reason()).contains("INVALID_SAMPLING");
    assertThat(ia.domain()).contains("xinserve.io");
    assertThat(ia.getMessage()).contains("invalid request");
  }

  @Test
  void resourceExhaustedCarriesRetryDelay() throws Exception {
    XinserveException e =
        failWith(
            com.google.rpc.Status.newBuilder()
                .setCode(Code.RESOURCE_EXHAUSTED_VALUE)
                .setMessage("admission queue full")
                .addDetails(
                    Any.pack(
                        RetryInfo.newBuilder()
                            .setRetryDelay(com.google.protobuf.Duration.newBuilder().setSeconds(1).setNanos(500_000_000))
                            .build()))
                .build());
    assertThat(e).isInstanceOf(ResourceExhaustedException.class);
    assertThat(e.retryDelay()).contains(Duration.ofMillis(1500));
    assertThat(e.isRetryable()).isTrue();
  }

  @Test
  void eachStatusCodeMapsToItsException() throws Exception {
    Map<Status.Code, Class<? extends XinserveException>> cases =
        Map.of(
            Status.Code.NOT_FOUND, NotFoundException.class,
            Status.Code.UNAVAILABLE, UnavailableException.class,
            Status.Code.UNAUTHENTICATED, UnauthenticatedException.class,
            Status.Code.PERMISSION_DENIED, PermissionDeniedException.class,
            Status.Code.FAILED_PRECONDITION, FailedPreconditionException.class,
            Status.Code.DEADLINE_EXCEEDED, DeadlineExceededException.class,
            Status.Code.INVALID_ARGUMENT, InvalidArgumentException.class,
            Status.Code.INTERNAL, XinserveException.class);
    Service s = new Service();
    start(s, XinserveClient.builder().retryPolicy(RetryPolicy.none()));
    for (Map.Entry<Status.Code, Class<? extends XinserveException>> c : cases.entrySet()) {
      s.unaryFailure = Status.fromCode(c.getKey()).withDescription("boom");
      assertThatThrownBy(() -> client.generate(req("a")))
          .isExactlyInstanceOf(c.getValue())
          .satisfies(t -> assertThat(((XinserveException) t).code()).isEqualTo(c.getKey()));
      // the async form fails with the same typed exception
      CompletableFuture<GenerateResponse> f = client.generateAsync(req("a"));
      assertThatThrownBy(f::join).hasCauseExactlyInstanceOf(c.getValue());
    }
  }

  // ------------------------------------------------------------------ deadlines

  @Test
  void unaryDeadlineGivesDeadlineExceededAndTheServerSeesIt() throws Exception {
    Service s = new Service();
    s.unaryDelayMs = 2_000;
    start(s, XinserveClient.builder().unaryDeadline(Duration.ofMillis(200)));
    assertThatThrownBy(() -> client.generate(req("slow"))).isInstanceOf(DeadlineExceededException.class);
    assertThat(server.cancels.tryAcquire(60, TimeUnit.SECONDS)).as("server saw the call cancelled").isTrue();
  }

  @Test
  void streamDeadlineIsSeparateFromTheUnaryOne() throws Exception {
    Service s = new Service();
    s.streamLength = 40; // ~200 ms of streaming, longer than the unary deadline
    start(s, XinserveClient.builder().unaryDeadline(Duration.ofMillis(50)));
    try (ResponseStream<GenerateStreamResponse> st = client.generateStream(req("long"))) {
      assertThat(st.stream().count()).isEqualTo(40);
    }
    // ... and a stream deadline, when set, ends the stream with DEADLINE_EXCEEDED
    Service s2 = new Service();
    s2.endless = true;
    client.close();
    server.close();
    start(s2, XinserveClient.builder().streamDeadline(Duration.ofMillis(300)));
    try (ResponseStream<GenerateStreamResponse> st = client.generateStream(req("endless"))) {
      assertThatThrownBy(() -> st.forEachRemaining(x -> {})).isInstanceOf(DeadlineExceededException.class);
    }
    assertThat(server.cancels.tryAcquire(60, TimeUnit.SECONDS)).as("server saw the call cancelled").isTrue();
  }

  @Test
  void withDeadlineOverridesPerView() throws Exception {
    Service s = new Service();
    s.unaryDelayMs = 1_000;
    start(s);
    assertThatThrownBy(() -> client.withDeadline(Duration.ofMillis(100)).generate(req("a")))
        .isInstanceOf(DeadlineExceededException.class);
  }

  // ------------------------------------------------------------------ cancellation

  @Test
  void closingTheIteratorCancelsTheCall() throws Exception {
    Service s = new Service();
    s.endless = true;
    start(s);
    try (ResponseStream<GenerateStreamResponse> st = client.generateStream(req("x"))) {
      assertThat(st.next().getText()).isEqualTo("t0");
      assertThat(st.next().getText()).isEqualTo("t1");
    }
    assertThat(server.cancels.tryAcquire(60, TimeUnit.SECONDS)).as("server saw the call cancelled").isTrue();
  }

  @Test
  void closingTheJavaStreamCancelsTheCall() throws Exception {
    Service s = new Service();
    s.endless = true;
    start(s);
    try (var st = client.generateStream(req("x")).stream()) {
      assertThat(st.limit(3).count()).isEqualTo(3);
    }
    assertThat(server.cancels.tryAcquire(60, TimeUnit.SECONDS)).as("server saw the call cancelled").isTrue();
  }

  @Test
  void iteratorHonoursFlowControl() throws Exception {
    Service s = new Service();
    s.endless = true;
    start(s, XinserveClient.builder().streamPrefetch(4));
    try (ResponseStream<GenerateStreamResponse> st = client.generateStream(req("x"))) {
      st.next();
      Thread.sleep(300); // an eager reader would have buffered thousands by now
      assertThat(s.sent.get()).isLessThanOrEqualTo(8);
    }
  }

  @Test
  void cancellingAListenerCancelsTheCall() throws Exception {
    Service s = new Service();
    s.endless = true;
    start(s);
    CountDownLatch got = new CountDownLatch(3);
    AtomicReference<XinserveException> error = new AtomicReference<>();
    CountDownLatch ended = new CountDownLatch(1);
    Cancellable c =
        client.generateStream(
            req("x"),
            new StreamListener<>() {
              @Override
              public void onNext(GenerateStreamResponse m) {
                got.countDown();
              }

              @Override
              public void onError(XinserveException e) {
                error.set(e);
                ended.countDown();
              }
            });
    assertThat(got.await(5, TimeUnit.SECONDS)).isTrue();
    c.cancel();
    assertThat(server.cancels.tryAcquire(60, TimeUnit.SECONDS)).as("server saw the call cancelled").isTrue();
    assertThat(ended.await(5, TimeUnit.SECONDS)).isTrue();
    assertThat(error.get()).isInstanceOf(CancelledException.class);
  }

  @Test
  void listenerReceivesAllDeltasThenCompletion() throws Exception {
    start(new Service());
    List<String> texts = new ArrayList<>();
    CountDownLatch done = new CountDownLatch(1);
    client.generateStream(
        req("x"),
        new StreamListener<>() {
          @Override
          public void onNext(GenerateStreamResponse m) {
            texts.add(m.getText());
          }

          @Override
          public void onCompleted() {
            done.countDown();
          }
        });
    assertThat(done.await(5, TimeUnit.SECONDS)).isTrue();
    assertThat(texts).containsExactly("t0", "t1", "t2", "t3", "t4");
  }

  @Test
  void cancellingTheFutureCancelsTheCall() throws Exception {
    Service s = new Service();
    s.unaryDelayMs = 3_000;
    start(s);
    CompletableFuture<GenerateResponse> f = client.generateAsync(req("x"));
    Thread.sleep(100);
    f.cancel(true);
    assertThat(server.cancels.tryAcquire(60, TimeUnit.SECONDS)).as("server saw the call cancelled").isTrue();
  }

  @Test
  void fluxHasRealBackpressureAndCancellationCancelsTheCall() throws Exception {
    Service s = new Service();
    s.endless = true;
    start(s);
    Flux<GenerateStreamResponse> flux = client.reactor().generateStream(req("x"));
    StepVerifier.create(flux, 0)
        .thenRequest(3)
        .expectNextCount(3)
        .then(
            () -> {
              try {
                Thread.sleep(300);
              } catch (InterruptedException e) {
                throw new RuntimeException(e);
              }
              // the server may only have sent what was requested (plus nothing buffered)
              assertThat(s.sent.get()).isLessThanOrEqualTo(3);
            })
        .thenRequest(2)
        .expectNextCount(2)
        .thenCancel()
        .verify(Duration.ofSeconds(10));
    assertThat(server.cancels.tryAcquire(60, TimeUnit.SECONDS)).as("server saw the call cancelled").isTrue();
  }

  @Test
  void fluxTakeCancelsTheCall() throws Exception {
    Service s = new Service();
    s.endless = true;
    start(s);
    List<GenerateStreamResponse> got =
        client.reactor().generateStream(req("x")).take(4).collectList().block(Duration.ofSeconds(10));
    assertThat(got).hasSize(4);
    assertThat(server.cancels.tryAcquire(60, TimeUnit.SECONDS)).as("server saw the call cancelled").isTrue();
  }

  // ------------------------------------------------------------------ retry policy

  @Test
  void unaryCallsAreRetriedOnUnavailable() throws Exception {
    Service s = new Service();
    s.failFirstUnary = 2;
    start(
        s,
        XinserveClient.builder()
            .retryPolicy(new RetryPolicy(3, Duration.ofMillis(10), Duration.ofMillis(50), 2.0)));
    assertThat(client.generate(req("a")).getOutputs(0).getText()).isEqualTo("echo:a");
    assertThat(server.attempts("Generate")).isEqualTo(3);
  }

  @Test
  void retriesStopAtMaxAttempts() throws Exception {
    Service s = new Service();
    s.failFirstUnary = 5;
    start(
        s,
        XinserveClient.builder()
            .retryPolicy(new RetryPolicy(2, Duration.ofMillis(10), Duration.ofMillis(50), 2.0)));
    assertThatThrownBy(() -> client.generate(req("a"))).isInstanceOf(UnavailableException.class);
    assertThat(server.attempts("Generate")).isEqualTo(2);
  }

  @Test
  void noRetryWhenDisabled() throws Exception {
    Service s = new Service();
    s.failFirstUnary = 1;
    start(s, XinserveClient.builder().retryPolicy(RetryPolicy.none()));
    assertThatThrownBy(() -> client.generate(req("a"))).isInstanceOf(UnavailableException.class);
    assertThat(server.attempts("Generate")).isEqualTo(1);
  }

  @Test
  void streamIsRetriedBeforeItsFirstToken() throws Exception {
    Service s = new Service();
    s.failStreamBeforeFirst = true;
    s.failFirstUnary = 1;
    start(
        s,
        XinserveClient.builder()
            .retryPolicy(new RetryPolicy(3, Duration.ofMillis(10), Duration.ofMillis(50), 2.0)));
    try (ResponseStream<GenerateStreamResponse> st = client.generateStream(req("x"))) {
      assertThat(st.stream().count()).isEqualTo(5);
    }
    assertThat(server.attempts("GenerateStream")).isEqualTo(2);
  }

  @Test
  void streamIsNeverRetriedAfterTheFirstToken() throws Exception {
    Service s = new Service();
    s.failStreamAfterFirst = true;
    start(
        s,
        XinserveClient.builder()
            .retryPolicy(new RetryPolicy(5, Duration.ofMillis(10), Duration.ofMillis(50), 2.0)));
    List<String> got = new ArrayList<>();
    try (ResponseStream<GenerateStreamResponse> st = client.generateStream(req("x"))) {
      assertThatThrownBy(() -> st.forEachRemaining(m -> got.add(m.getText())))
          .isInstanceOf(UnavailableException.class);
    }
    assertThat(got).containsExactly("t0");
    assertThat(server.attempts("GenerateStream")).isEqualTo(1);
  }

  @Test
  void serviceConfigNamesEveryServiceAndOnlyUnavailable() {
    Map<String, Object> sc = XinserveClient.serviceConfig("round_robin", RetryPolicy.defaults());
    assertThat(sc.get("loadBalancingConfig"))
        .isEqualTo(
            List.of(
                Map.of(
                    "xinserve_tls_fail_fast",
                    Map.of("childPolicy", List.of(Map.of("round_robin", Map.of()))))));
    @SuppressWarnings("unchecked")
    Map<String, Object> mc = ((List<Map<String, Object>>) sc.get("methodConfig")).get(0);
    @SuppressWarnings("unchecked")
    Map<String, Object> rp = (Map<String, Object>) mc.get("retryPolicy");
    assertThat(rp.get("retryableStatusCodes")).isEqualTo(List.of("UNAVAILABLE"));
    assertThat(rp.get("maxAttempts")).isEqualTo(3.0);
    assertThat(rp.get("initialBackoff")).isEqualTo("0.200000000s");
    assertThat(XinserveClient.serviceConfig("round_robin", RetryPolicy.none())).doesNotContainKey("methodConfig");
  }
}
