package io.xinserve.spring.ai;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.grpc.Server;
import io.grpc.Status;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.InvalidArgumentException;
import io.xinserve.client.errors.UnavailableException;
import io.xinserve.spring.boot.XinserveClientCustomizer;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.ChatStreamResponse;
import io.xinserve.v1.CompletionOutput;
import io.xinserve.v1.EmbedRequest;
import io.xinserve.v1.EmbedResponse;
import io.xinserve.v1.Embedding;
import io.xinserve.v1.FinishReason;
import io.xinserve.v1.InferenceServiceGrpc;
import io.xinserve.v1.Usage;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.SystemMessage;
import org.springframework.ai.chat.messages.UserMessage;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.model.tool.ToolCallingChatOptions;
import org.springframework.ai.model.tool.ToolCallingManager;
import org.springframework.ai.model.tool.ToolExecutionResult;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.ai.tool.definition.ToolDefinition;
import org.springframework.ai.retry.TransientAiException;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import reactor.core.Disposable;

/** The Spring AI models against an in-process xinserve servicer. */
@Timeout(120)
class XinserveSpringAiTest {
  private final String name = InProcessServerBuilder.generateName();
  private final List<ChatRequest> chats = new CopyOnWriteArrayList<>();
  private final List<EmbedRequest> embeds = new CopyOnWriteArrayList<>();
  private final CountDownLatch streamCancelled = new CountDownLatch(1);
  private volatile Status failure;
  private Server server;
  private XinserveClient client;

  @BeforeEach
  void start() throws Exception {
    InferenceServiceGrpc.InferenceServiceImplBase service =
        new InferenceServiceGrpc.InferenceServiceImplBase() {
          @Override
          public void chat(ChatRequest r, StreamObserver<io.xinserve.v1.ChatResponse> out) {
            chats.add(r);
            if (failure != null) {
              out.onError(failure.asRuntimeException());
              return;
            }
            String roles =
                r.getMessagesList().stream().map(m -> m.getRole()).collect(Collectors.joining(","));
            out.onNext(
                io.xinserve.v1.ChatResponse.newBuilder()
                    .setRequestId("rid-1")
                    .addOutputs(
                        CompletionOutput.newBuilder()
                            .setText("reply to " + roles)
                            .setFinishReason(FinishReason.FINISH_REASON_LENGTH))
                    .setUsage(Usage.newBuilder().setPromptTokens(5).setCompletionTokens(3))
                    .build());
            out.onCompleted();
          }

          @Override
          public void chatStream(ChatRequest r, StreamObserver<ChatStreamResponse> observer) {
            chats.add(r);
            ServerCallStreamObserver<ChatStreamResponse> out =
                (ServerCallStreamObserver<ChatStreamResponse>) observer;
            out.setOnCancelHandler(streamCancelled::countDown);
            if (r.getModel().equals("endless")) {
              int[] i = {0};
              out.setOnReadyHandler(
                  () -> {
                    while (out.isReady() && !out.isCancelled()) {
                      out.onNext(ChatStreamResponse.newBuilder().setText("t" + i[0]++).build());
                    }
                  });
              return;
            }
            out.onNext(ChatStreamResponse.newBuilder().setText("Hel").build());
            out.onNext(
                ChatStreamResponse.newBuilder()
                    .setText("lo")
                    .setFinishReason(FinishReason.FINISH_REASON_STOP)
                    .setUsage(Usage.newBuilder().setPromptTokens(4).setCompletionTokens(2))
                    .build());
            out.onCompleted();
          }

          @Override
          public void embed(EmbedRequest r, StreamObserver<EmbedResponse> out) {
            embeds.add(r);
            EmbedResponse.Builder b = EmbedResponse.newBuilder().setRequestId("rid-e");
            for (int i = r.getInputsCount() - 1; i >= 0; i--) {
              b.addEmbeddings(Embedding.newBuilder().setIndex(i).addValues(i).addValues(1f));
            }
            out.onNext(b.build());
            out.onCompleted();
          }
        };
    server = InProcessServerBuilder.forName(name).addService(service).build().start();
    client =
        XinserveClient.builder()
            .channelBuilder(InProcessChannelBuilder.forName(name))
            .defaultModel("tiny")
            .defaultEmbeddingModel("minilm")
            .build();
  }

  @AfterEach
  void stop() throws Exception {
    client.close();
    server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
  }

  @Test
  void chatClientCallMapsRolesOptionsAndMetadata() {
    XinserveChatModel model =
        new XinserveChatModel(client, XinserveChatOptions.builder().temperature(0.0).maxTokens(16).build());
    ChatClient chat = ChatClient.create(model);
    assertThat(chat.prompt().system("be brief").user("hi").call().content()).isEqualTo("reply to system,user");
    ChatRequest sent = chats.get(0);
    assertThat(sent.getModel()).isEqualTo("tiny");
    assertThat(sent.getSamplingParams().getTemperature()).isZero();
    assertThat(sent.getSamplingParams().getMaxTokens()).isEqualTo(16);

    ChatResponse r =
        model.call(
            new Prompt(
                List.of(new SystemMessage("s"), new UserMessage("u"), new AssistantMessage("a"), new UserMessage("u2")),
                ChatOptions.builder().model("other").topP(0.5).topK(7).stopSequences(List.of("\n")).build()));
    assertThat(r.getResult().getOutput().getText()).isEqualTo("reply to system,user,assistant,user");
    assertThat(r.getResult().getMetadata().getFinishReason()).isEqualTo("LENGTH");
    assertThat(r.getMetadata().getId()).isEqualTo("rid-1");
    assertThat(r.getMetadata().getUsage().getPromptTokens()).isEqualTo(5);
    assertThat(r.getMetadata().getUsage().getCompletionTokens()).isEqualTo(3);
    ChatRequest second = chats.get(1);
    assertThat(second.getModel()).isEqualTo("other");
    assertThat(second.getSamplingParams().getTopP()).isEqualTo(0.5f);
    assertThat(second.getSamplingParams().getTopK()).isEqualTo(7);
    assertThat(second.getSamplingParams().getStopList()).containsExactly("\n");
    assertThat(second.getSamplingParams().getTemperature()).as("default kept").isZero();
  }

  @Test
  void structuredOutputSchemaAndSeedBecomeSamplingParams() {
    XinserveChatModel model = new XinserveChatModel(client, null);
    String schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}";
    model.call(new Prompt("q", XinserveChatOptions.builder().outputSchema(schema).seed(42L).repetitionPenalty(1.1).ignoreEos(true).build()));
    assertThat(chats.get(0).getSamplingParams().getIgnoreEos()).isTrue();
    assertThat(chats.get(0).getSamplingParams().getJsonSchema()).isEqualTo(schema);
    assertThat(chats.get(0).getSamplingParams().getSeed()).isEqualTo(42L);
    assertThat(chats.get(0).getSamplingParams().getRepetitionPenalty()).isEqualTo(1.1f);
  }

  @Test
  void streamContentAndFinishReason() {
    XinserveChatModel model = new XinserveChatModel(client, null);
    List<String> parts = ChatClient.create(model).prompt().user("hi").stream().content().collectList().block(Duration.ofSeconds(60));
    assertThat(parts).containsExactly("Hel", "lo");
    List<ChatResponse> chunks = model.stream(new Prompt("hi")).collectList().block(Duration.ofSeconds(60));
    assertThat(chunks.get(1).getResult().getMetadata().getFinishReason()).isEqualTo("STOP");
    assertThat(chunks.get(1).getMetadata().getUsage().getCompletionTokens()).isEqualTo(2);
  }

  @Test
  void disposingTheFluxCancelsTheGrpcCall() throws Exception {
    XinserveChatModel model = new XinserveChatModel(client, XinserveChatOptions.builder().model("endless").build());
    CountDownLatch three = new CountDownLatch(3);
    Disposable d = model.stream(new Prompt("go")).subscribe(c -> three.countDown());
    assertThat(three.await(60, TimeUnit.SECONDS)).isTrue();
    d.dispose();
    assertThat(streamCancelled.await(60, TimeUnit.SECONDS)).as("server saw the cancel").isTrue();
  }

  @Test
  void errorsKeepTheXinserveExceptionAsCause() {
    XinserveChatModel model = new XinserveChatModel(client, null);
    failure = Status.INVALID_ARGUMENT.withDescription("bad temperature");
    assertThatThrownBy(() -> model.call(new Prompt("q")))
        .isInstanceOf(NonTransientAiException.class)
        .hasCauseInstanceOf(InvalidArgumentException.class)
        .hasMessageContaining("request id");
    failure = Status.UNAVAILABLE.withDescription("draining");
    XinserveClient noRetry =
        XinserveClient.builder()
            .channelBuilder(InProcessChannelBuilder.forName(name))
            .retryPolicy(io.xinserve.client.RetryPolicy.none())
            .defaultModel("tiny")
            .build();
    try (noRetry) {
      assertThatThrownBy(() -> new XinserveChatModel(noRetry, null).call(new Prompt("q")))
          .isInstanceOf(TransientAiException.class)
          .hasCauseInstanceOf(UnavailableException.class);
    }
  }

  @Test
  void embeddingModelEmbedsInInputOrder() {
    XinserveEmbeddingModel model = new XinserveEmbeddingModel(client, null);
    List<float[]> v = model.embed(List.of("a", "b", "c"));
    assertThat(v).hasSize(3);
    assertThat(v.get(0)[0]).isEqualTo(0f);
    assertThat(v.get(2)[0]).isEqualTo(2f);
    assertThat(embeds.get(0).getModel()).isEqualTo("minilm");
    assertThat(new XinserveEmbeddingModel(client, "e5").embed("x")).hasSize(2);
    assertThat(embeds.get(1).getModel()).isEqualTo("e5");
  }

  /** The starter's auto-configuration (the same class in the Boot 3 and the Boot 4 starter). */
  static Class<?> starterAutoConfiguration() {
    return io.xinserve.spring.boot.XinserveClientAutoConfiguration.class;
  }

  @Test
  void builtForTheRunningSpringBootAndRefusingTheOther() {
    java.util.Properties built = BuiltFor.properties();
    String boot = org.springframework.boot.SpringBootVersion.getVersion();
    assertThat(built.getProperty("spring-boot.version")).startsWith(boot.substring(0, 2));
    BuiltFor.require(boot, built.getProperty("spring-boot.version"), built.getProperty("artifact"));
    assertThatThrownBy(() -> BuiltFor.require("4.0.7", "3.5.7", "xinserve-spring-ai"))
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("use io.xinserve:xinserve-spring-ai-boot4");
    assertThatThrownBy(() -> BuiltFor.require("3.5.7", "4.0.7", "xinserve-spring-ai-boot4"))
        .hasMessageContaining("use io.xinserve:xinserve-spring-ai ");
  }

  @Test
  void autoConfiguredOnANamedClientWithADefaultModel() throws Exception {
    XinserveClientCustomizer inProcess = (n, b) -> b.channelBuilder(InProcessChannelBuilder.forName(name));
    new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(starterAutoConfiguration(), XinserveAiAutoConfiguration.class))
        .withBean(XinserveClientCustomizer.class, () -> inProcess)
        .withPropertyValues(
            "xinserve.client.address=x:1",
            "xinserve.client.model=tiny",
            "xinserve.client.clients.ai.address=y:1",
            "xinserve.client.clients.ai.model=named-model",
            "xinserve.client.clients.ai.embedding-model=named-embed",
            "xinserve.ai.client=ai",
            "xinserve.ai.chat.options.temperature=0.0",
            "xinserve.ai.chat.options.tool-choice=required",
            "xinserve.ai.chat.options.parallel-tool-calls=false")
        .run(
            ctx -> {
              assertThat(ctx).hasSingleBean(XinserveChatModel.class).hasSingleBean(XinserveEmbeddingModel.class);
              assertThat(ctx.getBean(XinserveChatModel.class).getOptions().getToolChoice()).isEqualTo("required");
              assertThat(ctx.getBean(XinserveChatModel.class).getOptions().getParallelToolCalls()).isFalse();
              ctx.getBean(XinserveChatModel.class).call("hello");
              assertThat(chats.get(0).getModel()).isEqualTo("named-model");
              assertThat(chats.get(0).getSamplingParams().getTemperature()).isZero();
              ctx.getBean(XinserveEmbeddingModel.class).embed("x");
              assertThat(embeds.get(0).getModel()).isEqualTo("named-embed");
            });
    new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(starterAutoConfiguration(), XinserveAiAutoConfiguration.class))
        .withPropertyValues("xinserve.client.address=x:1", "xinserve.ai.chat.enabled=false")
        .run(ctx -> assertThat(ctx).doesNotHaveBean(XinserveChatModel.class).hasSingleBean(XinserveEmbeddingModel.class));
  }

  @Test
  void theAutoConfiguredModelResolvesToolsWithTheApplicationsToolCallingManager() {
    XinserveClientCustomizer inProcess = (n, b) -> b.channelBuilder(InProcessChannelBuilder.forName(name));
    ToolCallingManager manager =
        new ToolCallingManager() {
          @Override
          public List<ToolDefinition> resolveToolDefinitions(ToolCallingChatOptions options) {
            return List.of(ToolDefinition.builder().name("fromBean").description("d").inputSchema("{}").build());
          }

          @Override
          public ToolExecutionResult executeToolCalls(Prompt prompt, ChatResponse response) {
            throw new AssertionError("no tool call expected");
          }
        };
    new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(starterAutoConfiguration(), XinserveAiAutoConfiguration.class))
        .withBean(XinserveClientCustomizer.class, () -> inProcess)
        .withBean(ToolCallingManager.class, () -> manager)
        .withPropertyValues("xinserve.client.address=x:1", "xinserve.client.model=tiny")
        .run(
            ctx -> {
              ctx.getBean(XinserveChatModel.class).call("hello");
              assertThat(chats.get(0).getToolsList()).extracting(io.xinserve.v1.Tool::getName).containsExactly("fromBean");
            });
  }
}
