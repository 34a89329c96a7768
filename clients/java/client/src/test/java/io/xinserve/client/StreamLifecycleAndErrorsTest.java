package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.google.protobuf.Any;
import com.google.rpc.BadRequest;
import com.google.rpc.Code;
import io.grpc.Context;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import io.xinserve.client.errors.CancelledException;
import io.xinserve.client.errors.DeadlineExceededException;
import io.xinserve.client.errors.InvalidArgumentException;
import io.xinserve.client.errors.TlsHandshakeException;
import io.xinserve.client.errors.UnavailableException;
import io.xinserve.client.errors.XinserveException;
import io.xinserve.client.errors.XinserveExceptions;
import io.xinserve.v1.ChatMessage;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.ChatResponse;
import io.xinserve.v1.CompletionOutput;
import io.xinserve.v1.FinishReason;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.InferenceServiceGrpc;
import io.xinserve.v1.SamplingParams;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import javax.net.ssl.SSLHandshakeException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import reactor.test.StepVerifier;

/** Stream lifecycle (GC, idle timeout), aborts, request ids on errors, text shortcuts. */
@Timeout(120)
class StreamLifecycleAndErrorsTest {
  private FakeServer server;
  private XinserveClient client;

  /** Streams without end (honouring flow control) until cancelled; echoes unary calls. */
  static class Service extends InferenceServiceGrpc.InferenceServiceImplBase {
    final CountDownLatch cancelled = new CountDownLatch(1);
    volatile boolean silentAfterFirst;
    volatile boolean abortAfter;
    volatile boolean blockUnary;
    volatile com.google.rpc.Status unaryFailure;
    final List<ChatRequest> chats = new ArrayList<>();
    final List<GenerateRequest> generates = new ArrayList<>();

    @Override
    public void generate(GenerateRequest request, StreamObserver<GenerateResponse> out) {
      generates.add(request);
      Context.current().addListener(c -> cancelled.countDown(), Runnable::run);
      if (unaryFailure != null) {
        out.onError(StatusProto.toStatusRuntimeException(unaryFailure));
        return;
      }
      if (blockUnary) {
        return; // never answers: only a deadline or a cancel ends it
      }
      out.onNext(
          GenerateResponse.newBuilder()
              .addOutputs(
                  CompletionOutput.newBuilder()
                      .setText("partial:" + request.getPrompt())
                      .setFinishReason(
                          abortAfter
                              ? FinishReason.FINISH_REASON_CANCELLED
                              : FinishReason.FINISH_REASON_LENGTH))
              .build());
      out.onCompleted();
    }

    @Override
    public void tokenize(
        io.xinserve.v1.TokenizeRequest request, StreamObserver<io.xinserve.v1.TokenizeResponse> out) {
      // one token per character, a 100-token context
      io.xinserve.v1.TokenizeResponse.Builder b = io.xinserve.v1.TokenizeResponse.newBuilder().setMaxModelLen(100);
      request.getText().chars().forEach(b::addTokenIds);
      out.onNext(b.build());
      out.onCompleted();
    }

    @Override
    public void chat(ChatRequest request, StreamObserver<ChatResponse> out) {
      chats.add(request);
      String joined =
          request.getMessagesList().stream()
              .map(m -> m.getRole() + "=" + m.getContent())
              .collect(Collectors.joining("|"));
      out.onNext(
          ChatResponse.newBuilder()
              .addOutputs(CompletionOutput.newBuilder().setText(joined))
              .build());
      out.onCompleted();
    }

    @Override
    public void generateStream(
        GenerateRequest request, StreamObserver<GenerateStreamResponse> observer) {
      generates.add(request);
      ServerCallStreamObserver<GenerateStreamResponse> out =
          (ServerCallStreamObserver<GenerateStreamResponse>) observer;
      out.setOnCancelHandler(cancelled::countDown);
      if (abortAfter) {
        out.onNext(GenerateStreamResponse.newBuilder().setText("a").build());
        out.onNext(
            GenerateStreamResponse.newBuilder()
                .setText("b")
                .setFinishReason(FinishReason.FINISH_REASON_CANCELLED)
                .build());
        out.onCompleted();
        return;
      }
      if (silentAfterFirst) {
        out.onNext(GenerateStreamResponse.newBuilder().setText("first").build());
        return; // then nothing, never completes
      }
      int[] i = {0};
      out.setOnReadyHandler(
          () -> {
            while (out.isReady() && !out.isCancelled()) {
              out.onNext(GenerateStreamResponse.newBuilder().setText(" t" + i[0]++).build());
            }
          });
    }
  }

  private Service start(Service s, XinserveClient.Builder b) throws Exception {
    server = new FakeServer(s);
    client = b.channelBuilder(server.channelBuilder()).build();
    return s;
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

  private static GenerateRequest req() {
    return GenerateRequest.newBuilder().setModel("m").setPrompt("p").build();
  }

  /** Opens a stream, reads one message and drops it without closing. */
  private void readOneAndForget() {
    ResponseStream<GenerateStreamResponse> s = client.generateStream(req());
    assertThat(s.next().getText()).isEqualTo(" t0");
  }

  @Test
  void aStreamDroppedWithoutCloseIsCancelledOnceUnreachable() throws Exception {
    Service s = start(new Service(), XinserveClient.builder());
    readOneAndForget();
    // the Cleaner runs only once the stream is unreachable: nothing gRPC holds may refer to it
    for (int i = 0; i < 600 && s.cancelled.getCount() > 0; i++) {
      System.gc();
      s.cancelled.await(100, TimeUnit.MILLISECONDS);
    }
    assertThat(s.cancelled.getCount()).as("server saw the dropped stream cancelled").isZero();
  }

  @Test
  void aStreamWithoutMessagesForTheIdleTimeoutIsCancelled() throws Exception {
    Service svc = new Service();
    svc.silentAfterFirst = true;
    start(svc, XinserveClient.builder().streamIdleTimeout(Duration.ofMillis(200)));
    try (ResponseStream<GenerateStreamResponse> s = client.generateStream(req())) {
      assertThat(s.next().getText()).isEqualTo("first");
      assertThatThrownBy(s::next)
          .isInstanceOf(DeadlineExceededException.class)
          .hasMessageContaining("idle")
          .satisfies(e -> assertThat(((XinserveException) e).requestId()).contains(s.requestId()));
    }
    assertThat(svc.cancelled.await(30, TimeUnit.SECONDS)).isTrue();
  }

  @Test
  void anAbortedUnaryCallIsCancelledNotATruncatedSuccess() throws Exception {
    Service svc = new Service();
    svc.abortAfter = true;
    start(svc, XinserveClient.builder());
    assertThatThrownBy(() -> client.generate(req()))
        .isInstanceOf(CancelledException.class)
        .hasMessageContaining("aborted");
    assertThatThrownBy(() -> client.generateAsync(req()).join())
        .hasCauseInstanceOf(CancelledException.class);
  }

  @Test
  void anAbortedStreamDeliversItsDeltasThenFailsCancelled() throws Exception {
    Service svc = new Service();
    svc.abortAfter = true;
    start(svc, XinserveClient.builder());
    List<String> got = new ArrayList<>();
    try (ResponseStream<GenerateStreamResponse> s = client.generateStream(req())) {
      assertThatThrownBy(() -> s.forEachRemaining(d -> got.add(d.getText())))
          .isInstanceOf(CancelledException.class);
    }
    assertThat(got).containsExactly("a", "b");
    StepVerifier.create(client.reactor().generateStream(req()).map(GenerateStreamResponse::getText))
        .expectNext("a", "b")
        .expectError(CancelledException.class)
        .verify(Duration.ofSeconds(30));
  }

  @Test
  void invalidSamplingFieldIsInvalidArgumentWithTheFieldAndTheRequestId() throws Exception {
    Service svc = new Service();
    svc.unaryFailure =
        com.google.rpc.Status.newBuilder()
            .setCode(Code.INVALID_ARGUMENT_VALUE)
            .setMessage("invalid sampling parameters")
            .addDetails(
                Any.pack(
                    BadRequest.newBuilder()
                        .addFieldViolations(
                            BadRequest.FieldViolation.newBuilder()
                                .setField("sampling_params.n")
                                .setDescription("n > 1 needs temperature > 0"))
                        .build()))
            .build();
    start(svc, XinserveClient.builder());
    GenerateRequest r =
        req().toBuilder()
            .setRequestId("rid-123")
            .setSamplingParams(SamplingParams.newBuilder().setN(3).setTemperature(0f))
            .build();
    assertThatThrownBy(() -> client.generate(r))
        .isInstanceOfSatisfying(
            InvalidArgumentException.class,
            e -> {
              assertThat(e.fieldViolation("sampling_params.n")).isPresent();
              assertThat(e.requestId()).contains("rid-123");
            });
  }

  @Test
  void everyCallStyleReportsTheRequestIdWithItsError() throws Exception {
    Service svc = new Service();
    svc.unaryFailure =
        com.google.rpc.Status.newBuilder().setCode(Code.NOT_FOUND_VALUE).setMessage("no model").build();
    start(svc, XinserveClient.builder());
    // generated ids travel too
    XinserveException blocking = catchXe(() -> client.generate(req()));
    assertThat(blocking.requestId()).isPresent();
    CompletableFuture<GenerateResponse> f = client.generateAsync(req().toBuilder().setRequestId("a-1").build());
    assertThatThrownBy(f::join)
        .isInstanceOf(CompletionException.class)
        .satisfies(e -> assertThat(((XinserveException) e.getCause()).requestId()).contains("a-1"));

    Service silent = new Service();
    silent.silentAfterFirst = true;
    tearDown();
    start(silent, XinserveClient.builder());
    AtomicReference<XinserveException> err = new AtomicReference<>();
    CountDownLatch done = new CountDownLatch(1);
    CallHandle h =
        client.generateStream(
            req().toBuilder().setRequestId("cb-7").build(),
            new StreamListener<>() {
              @Override
              public void onNext(GenerateStreamResponse m) {}

              @Override
              public void onError(XinserveException e) {
                err.set(e);
                done.countDown();
              }
            });
    assertThat(h.requestId()).isEqualTo("cb-7");
    h.cancel();
    assertThat(done.await(30, TimeUnit.SECONDS)).isTrue();
    assertThat(err.get()).isInstanceOf(CancelledException.class);
    assertThat(err.get().requestId()).contains("cb-7");
  }

  @Test
  void anAsyncDeadlineEndsTheCallItselfUnlikeOrTimeout() throws Exception {
    Service svc = new Service();
    svc.blockUnary = true;
    start(svc, XinserveClient.builder());
    CompletableFuture<GenerateResponse> f = client.generateAsync(req(), Duration.ofMillis(200));
    assertThatThrownBy(() -> f.get(60, TimeUnit.SECONDS))
        .hasCauseInstanceOf(DeadlineExceededException.class);
    assertThat(server.cancels.tryAcquire(30, TimeUnit.SECONDS)).as("server saw the call end").isTrue();
  }

  @Test
  void aTlsHandshakeFailureIsItsOwnNonRetryableException() {
    XinserveException e =
        XinserveExceptions.from(
            Status.UNAVAILABLE
                .withDescription("io exception")
                .withCause(new SSLHandshakeException("PKIX path building failed"))
                .asRuntimeException());
    assertThat(e).isInstanceOf(TlsHandshakeException.class).isNotInstanceOf(UnavailableException.class);
    assertThat(e.getMessage()).contains("TLS handshake failed").contains("PKIX path building failed");
    assertThat(e.isRetryable()).isFalse();
    // an UNAVAILABLE without a TLS cause stays retryable
    assertThat(XinserveExceptions.from(Status.UNAVAILABLE.asRuntimeException()))
        .isInstanceOf(UnavailableException.class);
  }

  @Test
  void anOldProtobufRuntimeFailsAtConstructionNamingBothVersions() {
    assertThatThrownBy(
            () ->
                ProtobufRuntimeCheck.verify(
                    () -> {
                      throw new NoClassDefFoundError("com/google/protobuf/RuntimeVersion");
                    },
                    () -> "3.21.12"))
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("protoc " + ProtobufRuntimeCheck.gencodeVersion())
        .hasMessageContaining("protobuf-java 3.21.12")
        .hasMessageContaining("xinserve-bom");
    assertThat(ProtobufRuntimeCheck.gencodeVersion()).matches("\\d+\\.\\d+\\.\\d+");
    assertThat(ProtobufRuntimeCheck.runtimeVersion()).matches("\\d+\\.\\d+\\.\\d+");
  }

  @Test
  void textShortcutsUseTheDefaultModel() throws Exception {
    Service svc = start(new Service(), XinserveClient.builder().defaultModel("tiny"));
    assertThat(client.generateText("hi")).isEqualTo("partial:hi");
    assertThat(client.chat("be brief", "hello")).isEqualTo("system=be brief|user=hello");
    try (Stream<String> s = client.streamText("x")) {
      assertThat(s.limit(3).collect(Collectors.joining())).isEqualTo(" t0 t1 t2");
    }
    assertThat(svc.cancelled.await(30, TimeUnit.SECONDS)).as("closing the text stream cancels").isTrue();
    StepVerifier.create(client.reactor().streamText("y").take(2)).expectNext(" t0", " t1").verifyComplete();
    // a request without a model gets the default; one with a model keeps it
    client.chat(ChatRequest.newBuilder().addMessages(ChatMessage.newBuilder().setRole("user").setContent("q")).build());
    client.generate(GenerateRequest.newBuilder().setModel("other").setPrompt("q").build());
    assertThat(svc.chats).extracting(ChatRequest::getModel).containsOnly("tiny");
    assertThat(svc.generates).extracting(GenerateRequest::getModel).contains("tiny", "other");
    assertThat(svc.generates.get(svc.generates.size() - 1).getModel()).isEqualTo("other");
  }

  @Test
  void embeddingNoTextsGivesNoVectorsWithoutACall() throws Exception {
    start(new Service(), XinserveClient.builder().defaultEmbeddingModel("minilm"));
    assertThat(client.embed("minilm", List.of())).isEmpty();
    assertThat(client.embed(List.of())).isEmpty();
  }

  @Test
  void textShortcutsAskForTheWholeAnswer() throws Exception {
    Service svc = start(new Service(), XinserveClient.builder().defaultModel("tiny"));
    client.generateText("hi");
    assertThat(svc.generates.get(0).getSamplingParams().getMaxTokens())
        .as("the context left after the prompt: 100 - 2")
        .isEqualTo(98);
    try (Stream<String> s = client.streamText("four")) {
      assertThat(s.findFirst()).isPresent();
    }
    assertThat(svc.generates.get(1).getSamplingParams().getMaxTokens()).isEqualTo(96);
    StepVerifier.create(client.reactor().streamText("x").take(1)).expectNextCount(1).verifyComplete();
    assertThat(svc.generates.get(2).getSamplingParams().getMaxTokens()).isEqualTo(99);
    client.chat("be brief", "hello");
    assertThat(svc.chats.get(0).getSamplingParams().hasMaxTokens())
        .as("chat leaves max_tokens to the server's chat default (until EOS or the context)")
        .isFalse();
  }

  @Test
  void textShortcutsWithoutADefaultModelSaySo() throws Exception {
    start(new Service(), XinserveClient.builder());
    assertThatThrownBy(() -> client.generateText("hi"))
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("defaultModel");
  }

  private static XinserveException catchXe(Runnable r) {
    try {
      r.run();
    } catch (XinserveException e) {
      return e;
    }
    throw new AssertionError("no exception");
  }
}
