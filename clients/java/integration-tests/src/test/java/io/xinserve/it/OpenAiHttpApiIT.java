package io.xinserve.it;

import static io.xinserve.it.LiveServers.TINY;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.xinserve.client.XinserveClient;
import io.xinserve.v1.ChatMessage;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.SamplingParams;
import java.net.http.HttpClient;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.ai.chat.messages.SystemMessage;
import org.springframework.ai.chat.messages.UserMessage;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.openai.OpenAiChatModel;
import org.springframework.ai.openai.OpenAiChatOptions;
import org.springframework.ai.openai.api.OpenAiApi;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.http.client.JdkClientHttpRequestFactory;
import org.springframework.http.client.reactive.JdkClientHttpConnector;
import org.springframework.web.client.RestClient;
import org.springframework.web.reactive.function.client.WebClient;

/**
 * Spring AI's OpenAI chat model ({@code spring-ai-openai}) against the live server's
 * OpenAI-compatible HTTP listener ({@code POST /v1/chat/completions}, bearer token as the API key):
 * greedy call and stream give the gRPC {@code Chat} answer; a refused token is HTTP 401.
 */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class OpenAiHttpApiIT {
  private static final String SYSTEM = "be brief";
  private static final String USER = "你好";
  private static final int MAX_TOKENS = 12;

  private static XinserveClient grpc;

  @BeforeAll
  static void connect() {
    grpc = LiveServers.get().plainClient().build();
  }

  @AfterAll
  static void disconnect() {
    grpc.close();
  }

  private static OpenAiChatModel openAi(String apiKey) {
    // HTTP/1.1: the JDK HttpClient's default on http:// URLs is an h2c upgrade request, whose
    // body the server's HTTP/1.1 listener does not read (400 "body: is not valid JSON")
    HttpClient http11 = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
    OpenAiApi api =
        OpenAiApi.builder()
            .baseUrl("http://127.0.0.1:" + LiveServers.get().httpPort)
            .apiKey(apiKey)
            .restClientBuilder(RestClient.builder().requestFactory(new JdkClientHttpRequestFactory(http11)))
            .webClientBuilder(WebClient.builder().clientConnector(new JdkClientHttpConnector(http11)))
            .build();
    return OpenAiChatModel.builder()
        .openAiApi(api)
        .defaultOptions(
            OpenAiChatOptions.builder().model(TINY).temperature(0.0).maxTokens(MAX_TOKENS).build())
        .build();
  }

  private static Prompt prompt() {
    return new Prompt(List.of(new SystemMessage(SYSTEM), new UserMessage(USER)));
  }

  /** The same greedy question over plain gRPC. */
  private static String grpcAnswer() {
    return grpc.chat(
            ChatRequest.newBuilder()
                .setModel(TINY)
                .addMessages(ChatMessage.newBuilder().setRole("system").setContent(SYSTEM))
                .addMessages(ChatMessage.newBuilder().setRole("user").setContent(USER))
                .setSamplingParams(SamplingParams.newBuilder().setTemperature(0f).setMaxTokens(MAX_TOKENS))
                .build())
        .getOutputs(0)
        .getText();
  }

  @Test
  void callAndStreamGiveTheGrpcAnswer() {
    String expected = grpcAnswer();
    assertThat(expected).isNotEmpty();
    OpenAiChatModel model = openAi(LiveServers.TOKEN);

    ChatResponse called = model.call(prompt());
    assertThat(called.getResult().getOutput().getText()).isEqualTo(expected);
    assertThat(called.getMetadata().getModel()).isEqualTo(TINY);

    List<ChatResponse> chunks = model.stream(prompt()).collectList().block(Duration.ofSeconds(120));
    assertThat(chunks).isNotEmpty();
    String streamed =
        String.join(
            "",
            chunks.stream()
                .filter(c -> c.getResult() != null)
                .map(c -> c.getResult().getOutput().getText())
                .filter(Objects::nonNull)
                .toList());
    assertThat(streamed).isEqualTo(expected);
  }

  @Test
  void refusedTokenIsUnauthorized() {
    OpenAiChatModel model = openAi("not-a-valid-token-0123456789");
    assertThatThrownBy(() -> model.call(prompt()))
        .isInstanceOf(NonTransientAiException.class)
        .hasMessageStartingWith("401")
        .hasMessageContaining("authentication_error");
  }
}
