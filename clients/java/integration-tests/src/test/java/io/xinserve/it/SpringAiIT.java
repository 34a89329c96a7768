package io.xinserve.it;

import static io.xinserve.it.LiveServers.MINILM;
import static io.xinserve.it.LiveServers.TINY;
import static org.assertj.core.api.Assertions.assertThat;

import io.xinserve.client.XinserveClient;
import io.xinserve.spring.ai.XinserveAiAutoConfiguration;
import io.xinserve.spring.ai.XinserveChatModel;
import io.xinserve.spring.ai.XinserveChatOptions;
import io.xinserve.spring.boot.XinserveClientAutoConfiguration;
import io.xinserve.v1.ChatMessage;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.SamplingParams;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.embedding.EmbeddingModel;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import reactor.core.Disposable;

/**
 * Spring AI's {@code ChatClient} and {@code EmbeddingModel} on the auto-configured xinserve models,
 * against the live server (plaintext listener, bearer token), with the built-in models.
 */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class SpringAiIT {
  private static XinserveClient grpc;

  @BeforeAll
  static void connect() {
    grpc = LiveServers.get().plainClient().build();
  }

  @AfterAll
  static void disconnect() {
    grpc.close();
  }

  private static ApplicationContextRunner app() {
    return new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(XinserveClientAutoConfiguration.class, XinserveAiAutoConfiguration.class))
        .withPropertyValues(
            "xinserve.client.address=dns:///127.0.0.1:" + LiveServers.get().server.port,
            "xinserve.client.plaintext=true",
            "xinserve.client.token=" + LiveServers.TOKEN,
            "xinserve.client.deadline.unary=120s",
            "xinserve.client.model=" + TINY,
            "xinserve.client.embedding-model=" + MINILM,
            "xinserve.ai.chat.options.temperature=0",
            "xinserve.ai.chat.options.max-tokens=12");
  }

  /** The same question asked over plain gRPC, greedy, for comparison. */
  private static String grpcAnswer(String system, String user) {
    return grpc.chat(
            ChatRequest.newBuilder()
                .setModel(TINY)
                .addMessages(ChatMessage.newBuilder().setRole("system").setContent(system))
                .addMessages(ChatMessage.newBuilder().setRole("user").setContent(user))
                .setSamplingParams(SamplingParams.newBuilder().setTemperature(0f).setMaxTokens(12))
                .build())
        .getOutputs(0)
        .getText();
  }

  @Test
  void chatClientCallAndStreamGiveTheGrpcAnswer() {
    String expected = grpcAnswer("be brief", "你好");
    assertThat(expected).isNotEmpty();
    app().run(
        ctx -> {
          ChatClient chat = ChatClient.create(ctx.getBean(ChatModel.class));
          String called = chat.prompt().system("be brief").user("你好").call().content();
          assertThat(called).isEqualTo(expected);
          List<String> parts =
              chat.prompt().system("be brief").user("你好").stream().content()
                  .collectList()
                  .block(Duration.ofSeconds(120));
          assertThat(parts).isNotEmpty();
          assertThat(String.join("", parts)).isEqualTo(expected);
        });
  }

  @Test
  void chatClientWithoutMaxTokensReturnsTheWholeAnswer() {
    try (XinserveClient c = LiveServers.get().plainClient().defaultModel(TINY).unaryDeadline(Duration.ofSeconds(240)).build()) {
      int context = ClientIT.contextLengthOf(c);
      ChatClient chat = ChatClient.create(new XinserveChatModel(c, XinserveChatOptions.builder().temperature(0.0).build()));
      org.springframework.ai.chat.model.ChatResponse r = chat.prompt().user("Tell me about the sea.").call().chatResponse();
      var usage = r.getMetadata().getUsage();
      String finish = r.getResult().getMetadata().getFinishReason();
      // whole: ended by the model (STOP) or by the context, never by a default token budget
      if (!"STOP".equals(finish)) {
        assertThat(finish).isEqualTo("LENGTH");
        assertThat(usage.getPromptTokens() + usage.getCompletionTokens()).isEqualTo(context);
      }
    }
  }

  @Test
  void perCallXinserveOptionsThroughChatClientReachTheServer() {
    app().run(
        ctx -> {
          ChatClient chat = ChatClient.create(ctx.getBean(ChatModel.class));
          org.springframework.ai.chat.model.ChatResponse r =
              chat.prompt().user("Tell me about the sea.")
                  .options(XinserveChatOptions.builder().maxTokens(3).ignoreEos(true).build())
                  .call()
                  .chatResponse();
          assertThat(r.getMetadata().getUsage().getCompletionTokens()).isEqualTo(3);
          assertThat(r.getResult().getMetadata().getFinishReason()).isEqualTo("LENGTH");
        });
  }

  @Test
  void embeddingModelEmbedsWithTheBuiltInModel() {
    List<float[]> expected = grpc.embed(MINILM, List.of("A cat sits on the mat."));
    app().run(
        ctx -> {
          EmbeddingModel model = ctx.getBean(EmbeddingModel.class);
          float[] v = model.embed("A cat sits on the mat.");
          assertThat(v).hasSize(384).containsExactly(expected.get(0));
          assertThat(model.dimensions()).isEqualTo(384);
        });
  }

  @Test
  void disposingTheFluxAfterThreeTokensEndsTheEngineRequest() throws Exception {
    ClientIT.awaitIdleOn(grpc, Duration.ofSeconds(60));
    int budget = Math.max(64, ClientIT.contextLengthOf(grpc) - 64);
    app().run(
        ctx -> {
          XinserveChatModel model = ctx.getBean(XinserveChatModel.class);
          CountDownLatch three = new CountDownLatch(3);
          Disposable d =
              model
                  .stream(
                      new Prompt(
                          "tell a long story",
                          XinserveChatOptions.builder().maxTokens(budget).ignoreEos(true).build()))
                  .subscribe(c -> three.countDown());
          try {
            assertThat(three.await(120, TimeUnit.SECONDS)).isTrue();
            assertThat(grpc.load().getRunning()).isEqualTo(1);
          } finally {
            d.dispose();
          }
          ClientIT.awaitIdleOn(grpc, Duration.ofSeconds(60));
        });
  }
}
