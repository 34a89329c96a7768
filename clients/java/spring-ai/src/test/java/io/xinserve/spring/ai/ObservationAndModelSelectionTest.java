package io.xinserve.spring.ai;

import static org.assertj.core.api.Assertions.assertThat;

import io.grpc.Server;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.micrometer.observation.tck.TestObservationRegistry;
import io.micrometer.observation.tck.TestObservationRegistryAssert;
import io.xinserve.client.XinserveClient;
import io.xinserve.spring.boot.XinserveClientCustomizer;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.ChatStreamResponse;
import io.xinserve.v1.CompletionOutput;
import io.xinserve.v1.FinishReason;
import io.xinserve.v1.InferenceServiceGrpc;
import io.xinserve.v1.Usage;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.observation.ChatModelMeterObservationHandler;
import org.springframework.ai.chat.observation.ChatModelObservationContext;
import org.springframework.ai.chat.observation.DefaultChatModelObservationConvention;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.openai.OpenAiChatModel;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.context.annotation.ImportCandidates;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * Spring AI's chat-model observations of {@link XinserveChatModel} (against an in-process
 * xinserve servicer), and {@code spring.ai.model.chat} choosing between xinserve and Spring AI's
 * OpenAI starter with every Spring AI auto-configuration of the test class path and xinserve's
 * client and Spring AI ones applied, as in an application that has both starters.
 */
@Timeout(120)
class ObservationAndModelSelectionTest {
  private final String name = InProcessServerBuilder.generateName();
  private Server server;
  private XinserveClient client;

  @BeforeEach
  void start() throws Exception {
    InferenceServiceGrpc.InferenceServiceImplBase service =
        new InferenceServiceGrpc.InferenceServiceImplBase() {
          @Override
          public void chat(ChatRequest r, StreamObserver<io.xinserve.v1.ChatResponse> out) {
            out.onNext(
                io.xinserve.v1.ChatResponse.newBuilder()
                    .setRequestId("rid-1")
                    .addOutputs(
                        CompletionOutput.newBuilder()
                            .setText("hello")
                            .setFinishReason(FinishReason.FINISH_REASON_STOP))
                    .setUsage(Usage.newBuilder().setPromptTokens(5).setCompletionTokens(3))
                    .build());
            out.onCompleted();
          }

          @Override
          public void chatStream(ChatRequest r, StreamObserver<ChatStreamResponse> out) {
            out.onNext(ChatStreamResponse.newBuilder().setRequestId("rid-2").setText("Hel").build());
            out.onNext(
                ChatStreamResponse.newBuilder()
                    .setRequestId("rid-2")
                    .setText("lo")
                    .setFinishReason(FinishReason.FINISH_REASON_STOP)
                    .setUsage(Usage.newBuilder().setPromptTokens(4).setCompletionTokens(2))
                    .build());
            out.onCompleted();
          }
        };
    server = InProcessServerBuilder.forName(name).addService(service).build().start();
    client = XinserveClient.builder().channelBuilder(InProcessChannelBuilder.forName(name)).defaultModel("tiny").build();
  }

  @AfterEach
  void stop() throws Exception {
    client.close();
    server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
  }

  @Test
  void callIsOneGenAiClientOperationWithSpringAisKeysAndTokenUsage() {
    TestObservationRegistry registry = TestObservationRegistry.create();
    XinserveChatModel model =
        new XinserveChatModel(client, XinserveChatOptions.builder().temperature(0.0).maxTokens(7).build(), null, registry);

    assertThat(ChatClient.create(model).prompt().user("hi").call().content()).isEqualTo("hello");

    TestObservationRegistryAssert.assertThat(registry)
        .hasNumberOfObservationsWithNameEqualTo(DefaultChatModelObservationConvention.DEFAULT_NAME, 1)
        .hasObservationWithNameEqualTo("gen_ai.client.operation")
        .that()
        .hasContextualNameEqualTo("chat tiny")
        .hasLowCardinalityKeyValue("gen_ai.operation.name", "chat")
        .hasLowCardinalityKeyValue("gen_ai.system", "xinserve")
        .hasLowCardinalityKeyValue("gen_ai.request.model", "tiny")
        .hasLowCardinalityKeyValue("gen_ai.response.model", "tiny")
        .hasHighCardinalityKeyValue("gen_ai.request.max_tokens", "7")
        .hasHighCardinalityKeyValue("gen_ai.request.temperature", "0.0")
        .hasHighCardinalityKeyValue("gen_ai.response.id", "rid-1")
        .hasHighCardinalityKeyValue("gen_ai.response.finish_reasons", "[\"STOP\"]")
        .hasHighCardinalityKeyValue("gen_ai.usage.input_tokens", "5")
        .hasHighCardinalityKeyValue("gen_ai.usage.output_tokens", "3")
        .hasHighCardinalityKeyValue("gen_ai.usage.total_tokens", "8")
        .hasBeenStarted()
        .hasBeenStopped();
  }

  @Test
  void aStreamIsOneObservationWithTheAggregatedUsage() {
    TestObservationRegistry registry = TestObservationRegistry.create();
    XinserveChatModel model = new XinserveChatModel(client, null, null, registry);

    List<String> parts =
        ChatClient.create(model).prompt().user("hi").stream().content().collectList().block(Duration.ofSeconds(60));
    assertThat(String.join("", parts)).isEqualTo("Hello");

    TestObservationRegistryAssert.assertThat(registry)
        .hasNumberOfObservationsWithNameEqualTo("gen_ai.client.operation", 1)
        .hasObservationWithNameEqualTo("gen_ai.client.operation")
        .that()
        .hasLowCardinalityKeyValue("gen_ai.system", "xinserve")
        .hasLowCardinalityKeyValue("gen_ai.request.model", "tiny")
        .hasHighCardinalityKeyValue("gen_ai.usage.input_tokens", "4")
        .hasHighCardinalityKeyValue("gen_ai.usage.output_tokens", "2")
        .hasBeenStopped();
  }

  @Test
  void springAisMeterHandlerCountsInputAndOutputTokens() {
    TestObservationRegistry registry = TestObservationRegistry.create();
    SimpleMeterRegistry meters = new SimpleMeterRegistry();
    registry.observationConfig().observationHandler(new ChatModelMeterObservationHandler(meters));
    new XinserveChatModel(client, null, null, registry).call(new Prompt("hi"));

    List<Meter> usage = meters.find("gen_ai.client.token.usage").meters().stream().collect(Collectors.toList());
    assertThat(usage)
        .extracting(m -> m.getId().getTag("gen_ai.token.type") + "=" + m.measure().iterator().next().getValue())
        .containsExactlyInAnyOrder("input=5.0", "output=3.0", "total=8.0");
    assertThat(usage).allSatisfy(m -> assertThat(m.getId().getTag("gen_ai.system")).isEqualTo("xinserve"));
  }

  @Test
  void anApplicationsConventionIsUsed() {
    TestObservationRegistry registry = TestObservationRegistry.create();
    XinserveChatModel model = new XinserveChatModel(client, null, null, registry);
    model.setObservationConvention(
        new DefaultChatModelObservationConvention() {
          @Override
          public String getName() {
            return "bank.chat";
          }

          @Override
          public String getContextualName(ChatModelObservationContext context) {
            return "bank chat";
          }
        });
    model.call(new Prompt("hi"));
    TestObservationRegistryAssert.assertThat(registry)
        .hasObservationWithNameEqualTo("bank.chat")
        .that()
        .hasContextualNameEqualTo("bank chat")
        .hasLowCardinalityKeyValue("gen_ai.system", "xinserve");
  }

  private ApplicationContextRunner withEveryAutoConfiguration() {
    return withAutoConfigurations(c -> true);
  }

  private ApplicationContextRunner withAutoConfigurations(java.util.function.Predicate<String> keep) {
    List<String> all =
        ImportCandidates.load(AutoConfiguration.class, getClass().getClassLoader()).getCandidates().stream()
            .filter(
                c ->
                    c.startsWith("org.springframework.ai.")
                        || c.equals(XinserveSpringAiTest.starterAutoConfiguration().getName())
                        || c.equals(XinserveAiAutoConfiguration.class.getName()))
            .filter(keep)
            .toList();
    XinserveClientCustomizer inProcess = (n, b) -> b.channelBuilder(InProcessChannelBuilder.forName(name));
    return new ApplicationContextRunner()
        .withConfiguration(AutoConfigurations.of(all.stream().map(ObservationAndModelSelectionTest::load).toArray(Class<?>[]::new)))
        .withBean(XinserveClientCustomizer.class, () -> inProcess)
        .withPropertyValues("xinserve.client.address=x:1", "xinserve.client.model=tiny", "spring.ai.openai.api-key=not-used");
  }

  private static Class<?> load(String className) {
    try {
      return Class.forName(className, false, ObservationAndModelSelectionTest.class.getClassLoader());
    } catch (ClassNotFoundException e) {
      throw new IllegalStateException(e);
    }
  }

  @Test
  void springAiModelChatSelectsXinserveBesideTheOpenAiStarter() {
    TestObservationRegistry registry = TestObservationRegistry.create();
    withEveryAutoConfiguration()
        .withPropertyValues("spring.ai.model.chat=xinserve")
        .withBean(io.micrometer.observation.ObservationRegistry.class, () -> registry)
        .run(
            ctx -> {
              assertThat(ctx).hasNotFailed().hasSingleBean(ChatModel.class).doesNotHaveBean(OpenAiChatModel.class);
              assertThat(ctx.getBean(ChatModel.class)).isInstanceOf(XinserveChatModel.class);
              ChatClient chat = ctx.getBean(ChatClient.Builder.class).build();
              assertThat(chat.prompt().user("hi").call().content()).isEqualTo("hello");
              TestObservationRegistryAssert.assertThat(registry)
                  .hasObservationWithNameEqualTo("spring.ai.chat.client");
              TestObservationRegistryAssert.assertThat(registry)
                  .hasObservationWithNameEqualTo("spring.ai.advisor");
              TestObservationRegistryAssert.assertThat(registry)
                  .hasObservationWithNameEqualTo("gen_ai.client.operation")
                  .that()
                  .hasLowCardinalityKeyValue("gen_ai.system", "xinserve");
            });
  }

  @Test
  void anotherValueOfSpringAiModelChatSwitchesXinservesChatModelOff() {
    withEveryAutoConfiguration()
        .withPropertyValues("spring.ai.model.chat=openai")
        .run(
            ctx -> {
              assertThat(ctx).hasNotFailed().hasSingleBean(ChatModel.class).doesNotHaveBean(XinserveChatModel.class);
              assertThat(ctx.getBean(ChatModel.class)).isInstanceOf(OpenAiChatModel.class);
              assertThat(ctx).hasSingleBean(ChatClient.Builder.class);
            });
  }

  @Test
  void withoutAnotherProviderTheChatClientBuilderIsBuiltOnXinserve() {
    withAutoConfigurations(c -> !c.startsWith("org.springframework.ai.model.openai."))
        .run(
            ctx -> {
              assertThat(ctx).hasNotFailed().hasSingleBean(ChatModel.class).hasSingleBean(XinserveChatModel.class);
              assertThat(ctx.getBean(ChatClient.Builder.class).build().prompt().user("hi").call().content())
                  .isEqualTo("hello");
            });
  }
}
