package io.xinserve.it;

import static io.xinserve.it.LiveServers.MINILM;
import static io.xinserve.it.LiveServers.TINY;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.xinserve.client.ResponseStream;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.DeadlineExceededException;
import io.xinserve.client.errors.InvalidArgumentException;
import io.xinserve.client.errors.NotFoundException;
import io.xinserve.client.errors.XinserveException;
import io.xinserve.v1.ChatMessage;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.ChatResponse;
import io.xinserve.v1.ChatStreamResponse;
import io.xinserve.v1.DetokenizeRequest;
import io.xinserve.v1.EmbedRequest;
import io.xinserve.v1.EmbedResponse;
import io.xinserve.v1.FinishReason;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateResponse;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.GetServerInfoResponse;
import io.xinserve.v1.Model;
import io.xinserve.v1.ModelKind;
import io.xinserve.v1.ModelState;
import io.xinserve.v1.SamplingParams;
import io.xinserve.v1.TokenizeRequest;
import io.xinserve.v1.TokenizeResponse;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/** The SDK against the live server (plaintext listener, no auth). */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ClientIT {
  private static XinserveClient client;

  @BeforeAll
  static void connect() {
    client = LiveServers.get().plainClient().build();
  }

  @AfterAll
  static void disconnect() {
    client.close();
  }

  static GenerateRequest greedy(String prompt, int maxTokens) {
    return GenerateRequest.newBuilder()
        .setModel(TINY)
        .setPrompt(prompt)
        .setSamplingParams(SamplingParams.newBuilder().setTemperature(0f).setMaxTokens(maxTokens))
        .build();
  }

  /** A generation long enough to be cancelled while it runs. */
  static GenerateRequest endless(String prompt) {
    int budget = Math.max(64, contextLength() - 64);
    return GenerateRequest.newBuilder()
        .setModel(TINY)
        .setPrompt(prompt)
        .setSamplingParams(
            SamplingParams.newBuilder().setTemperature(0f).setMaxTokens(budget).setIgnoreEos(true))
        .build();
  }

  static int contextLength() {
    return contextLengthOf(client);
  }

  static int contextLengthOf(XinserveClient c) {
    return c.tokenize(TokenizeRequest.newBuilder().setModel(TINY).setText("x").build()).getMaxModelLen();
  }

  static void awaitIdle(XinserveClient c, Duration within) throws InterruptedException {
    awaitIdleOn(c, within);
  }

  /** Polls GetLoad until nothing runs, failing after {@code within}. */
  static void awaitIdleOn(XinserveClient c, Duration within) throws InterruptedException {
    long end = System.nanoTime() + within.toNanos();
    int running = -1;
    while (System.nanoTime() < end) {
      var load = c.load();
      running = load.getRunning();
      if (running == 0 && load.getInFlight() == 0) {
        return;
      }
      Thread.sleep(50);
    }
    throw new AssertionError("GetLoad().running is still " + running + " after " + within);
  }

  @Test
  void healthServerInfoAndModels() {
    assertThat(client.checkHealth("", Duration.ofSeconds(5))).isEqualTo(ServingStatus.SERVING);
    assertThat(client.checkHealth("xinserve.v1.InferenceService", Duration.ofSeconds(5)))
        .isEqualTo(ServingStatus.SERVING);
    GetServerInfoResponse info = client.serverInfo();
    assertThat(info.getServerVersion()).isNotEmpty();
    assertThat(info.getSchemaRevision()).isGreaterThanOrEqualTo(info.getMinClientRevision());
    List<Model> models = client.listModels();
    assertThat(models).extracting(Model::getName).contains(TINY, MINILM);
    assertThat(client.getModel(TINY).getKind()).isEqualTo(ModelKind.MODEL_KIND_GENERATE);
    assertThat(client.getModel(MINILM).getKind()).isEqualTo(ModelKind.MODEL_KIND_EMBED);
    assertThat(client.getModel(TINY).getState()).isEqualTo(ModelState.MODEL_STATE_READY);
  }

  @Test
  void unaryGenerate() {
    GenerateResponse r = client.generate(greedy("The bank said", 16));
    assertThat(r.getOutputsCount()).isEqualTo(1);
    assertThat(r.getOutputs(0).getTokenIdsCount()).isBetween(1, 16);
    assertThat(r.getUsage().getCompletionTokens()).isEqualTo(r.getOutputs(0).getTokenIdsCount());
    assertThat(r.getUsage().getPromptTokens()).isPositive();
    assertThat(r.getOutputs(0).getFinishReason())
        .isIn(FinishReason.FINISH_REASON_LENGTH, FinishReason.FINISH_REASON_STOP);
    assertThat(r.getRequestId()).isNotEmpty();
  }

  @Test
  void streamEqualsUnaryForGreedyDecoding() {
    GenerateResponse whole = client.generate(greedy("Once upon a time", 24));
    StringBuilder text = new StringBuilder();
    int tokens = 0;
    GenerateStreamResponse last = null;
    try (ResponseStream<GenerateStreamResponse> s = client.generateStream(greedy("Once upon a time", 24))) {
      for (GenerateStreamResponse d : s) {
        text.append(d.getText());
        tokens += d.getTokenIdsCount();
        last = d;
      }
      assertThat(last).isNotNull();
      assertThat(last.getRequestId()).isEqualTo(s.requestId());
    }
    assertThat(text.toString()).isEqualTo(whole.getOutputs(0).getText());
    assertThat(tokens).isEqualTo(whole.getOutputs(0).getTokenIdsCount());
    assertThat(last.getFinishReason()).isEqualTo(whole.getOutputs(0).getFinishReason());
    assertThat(last.getUsage().getCompletionTokens()).isEqualTo(tokens);
  }

  @Test
  void asyncAndReactorForms() {
    GenerateResponse viaFuture = client.generateAsync(greedy("abc", 8)).join();
    GenerateResponse viaMono = client.reactor().generate(greedy("abc", 8)).block(Duration.ofSeconds(60));
    assertThat(viaMono.getOutputs(0).getText()).isEqualTo(viaFuture.getOutputs(0).getText());
    List<GenerateStreamResponse> deltas =
        client.reactor().generateStream(greedy("abc", 8)).collectList().block(Duration.ofSeconds(60));
    assertThat(deltas.stream().map(GenerateStreamResponse::getText).reduce("", String::concat))
        .isEqualTo(viaFuture.getOutputs(0).getText());
  }

  @Test
  void chatAndChatStream() {
    ChatRequest req = ChatRequest.newBuilder()
        .setModel(TINY)
        .addMessages(ChatMessage.newBuilder().setRole("system").setContent("You are terse."))
        .addMessages(ChatMessage.newBuilder().setRole("user").setContent("你好"))
        .setSamplingParams(SamplingParams.newBuilder().setTemperature(0f).setMaxTokens(12))
        .build();
    ChatResponse whole = client.chat(req);
    assertThat(whole.getOutputs(0).getTokenIdsCount()).isBetween(1, 12);
    assertThat(whole.getUsage().getPromptTokens()).isPositive();
    StringBuilder text = new StringBuilder();
    try (ResponseStream<ChatStreamResponse> s = client.chatStream(req)) {
      s.forEachRemaining(d -> text.append(d.getText()));
    }
    assertThat(text.toString()).isEqualTo(whole.getOutputs(0).getText());
  }

  @Test
  void embed() {
    EmbedResponse r = client.embed(EmbedRequest.newBuilder().setModel(MINILM)
        .addInputs("人民币汇率").addInputs("interest rates").build());
    assertThat(r.getEmbeddingsCount()).isEqualTo(2);
    for (var e : r.getEmbeddingsList()) {
      assertThat(e.getValuesCount()).isEqualTo(384);
      double norm = 0;
      for (float v : e.getValuesList()) {
        norm += v * v;
      }
      assertThat(Math.sqrt(norm)).isCloseTo(1.0, org.assertj.core.data.Offset.offset(1e-3));
    }
    List<float[]> vectors = client.embed(MINILM, List.of("a", "b", "c"));
    assertThat(vectors).hasSize(3).allSatisfy(v -> assertThat(v).hasSize(384));
  }

  @Test
  void tokenizeAndDetokenize() {
    TokenizeResponse t = client.tokenize(TokenizeRequest.newBuilder()
        .setModel(TINY).setText("hello world").setAddSpecialTokens(false).build());
    assertThat(t.getTokenIdsCount()).isPositive();
    assertThat(t.getMaxModelLen()).isPositive();
    String text = client.detokenize(DetokenizeRequest.newBuilder().setModel(TINY)
        .addAllTokenIds(t.getTokenIdsList()).build()).getText();
    assertThat(text).isEqualTo("hello world");
  }

  @Test
  void closingAStreamMidwayCancelsTheEngineRequest() throws Exception {
    awaitIdle(client, Duration.ofSeconds(30));
    try (ResponseStream<GenerateStreamResponse> s = client.generateStream(endless("cancel me"))) {
      for (int i = 0; i < 3; i++) {
        assertThat(s.hasNext()).isTrue();
        s.next();
      }
      assertThat(client.load().getRunning()).isEqualTo(1);
    }
    awaitIdle(client, Duration.ofSeconds(10));
  }

  @Test
  void cancellingAFluxCancelsTheEngineRequest() throws Exception {
    awaitIdle(client, Duration.ofSeconds(30));
    List<GenerateStreamResponse> got =
        client.reactor().generateStream(endless("flux")).take(3).collectList().block(Duration.ofSeconds(60));
    assertThat(got).hasSize(3);
    awaitIdle(client, Duration.ofSeconds(10));
  }

  @Test
  void shortDeadlineGivesDeadlineExceededAndAbortsTheEngineRequest() throws Exception {
    awaitIdle(client, Duration.ofSeconds(30));
    XinserveClient hurried = client.withDeadline(Duration.ofMillis(300));
    assertThatThrownBy(() -> hurried.generate(endless("too slow")))
        .isInstanceOf(DeadlineExceededException.class);
    try (ResponseStream<GenerateStreamResponse> s = hurried.generateStream(endless("too slow"))) {
      assertThatThrownBy(() -> s.forEachRemaining(d -> {})).isInstanceOf(DeadlineExceededException.class);
    }
    awaitIdle(client, Duration.ofSeconds(10));
  }

  @Test
  void invalidParametersNameEveryField() {
    GenerateRequest bad = GenerateRequest.newBuilder()
        .setModel(TINY)
        .setPrompt("x")
        .setSamplingParams(SamplingParams.newBuilder().setTopP(1.5f).setTemperature(-1f))
        .build();
    assertThatThrownBy(() -> client.generate(bad))
        .isInstanceOfSatisfying(InvalidArgumentException.class, e -> {
          assertThat(e.fieldViolation("sampling_params.top_p")).isPresent();
          assertThat(e.fieldViolation("sampling_params.temperature")).isPresent();
        });
    try (ResponseStream<GenerateStreamResponse> s = client.generateStream(bad)) {
      assertThatThrownBy(s::hasNext).isInstanceOf(InvalidArgumentException.class);
    }
  }

  @Test
  void unknownModelIsNotFound() {
    assertThatThrownBy(() -> client.generate(greedy("x", 4).toBuilder().setModel("no-such-model").build()))
        .isInstanceOf(NotFoundException.class);
    assertThatThrownBy(() -> client.getModel("no-such-model")).isInstanceOf(NotFoundException.class);
  }

  @Test
  void abortOfAnUnknownIdIsFalse() {
    assertThat(client.abort("no-such-request")).isFalse();
  }

  @Test
  void abortByRequestIdEndsTheStream() throws Exception {
    awaitIdle(client, Duration.ofSeconds(30));
    try (ResponseStream<GenerateStreamResponse> s = client.generateStream(endless("abort me"))) {
      s.next();
      assertThat(client.abort(s.requestId())).isTrue();
      // the stream delivers what was generated, then fails CANCELLED: never a normal end
      assertThatThrownBy(() -> s.forEachRemaining(d -> {}))
          .isInstanceOfSatisfying(
              XinserveException.class, e -> assertThat(e.code()).isEqualTo(io.grpc.Status.Code.CANCELLED));
    }
    awaitIdle(client, Duration.ofSeconds(10));
  }
}
