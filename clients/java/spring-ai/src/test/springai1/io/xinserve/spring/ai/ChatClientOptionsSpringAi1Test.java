package io.xinserve.spring.ai;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.time.Duration;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.prompt.ChatOptions;

/**
 * Spring AI 1.1's {@code ChatClient}: the per-call options object replaces the model's default
 * options ({@code chatModel.getDefaultOptions().copy()} only when none is given); every xinserve
 * option reaches the server; a tool name no resolver knows fails before any call.
 */
@Timeout(60)
class ChatClientOptionsSpringAi1Test {
  private RecordingChatServer server;
  private ChatClient chat;

  @BeforeEach
  void start() throws Exception {
    server = new RecordingChatServer();
    chat =
        ChatClient.create(
            new XinserveChatModel(
                server.client, XinserveChatOptions.builder().temperature(0.0).maxTokens(64).build()));
  }

  @AfterEach
  void stop() throws Exception {
    server.close();
  }

  @Test
  void everyPerCallXinserveOptionReachesTheServerOnCallAndStream() {
    chat.prompt().user("q").options(EveryOption.builder().build()).call().content();
    EveryOption.assertSent(server.only());
    server.requests.clear();
    chat.prompt().user("q").options(EveryOption.builder().build()).stream().content().collectList().block(Duration.ofSeconds(30));
    EveryOption.assertSent(server.only());
  }

  @Test
  void perCallOptionsOverrideTheDefaultsFieldByField() {
    chat.prompt().user("q").options(XinserveChatOptions.builder().maxTokens(3).seed(7L).build()).call().content();
    var sp = server.only().getSamplingParams();
    assertThat(sp.getMaxTokens()).isEqualTo(3);
    assertThat(sp.getSeed()).isEqualTo(7L);
    assertThat(sp.getTemperature()).as("the model's default kept").isZero();
    server.requests.clear();
    chat.prompt().user("q").options(ChatOptions.builder().maxTokens(5).stopSequences(List.of("!")).build()).call().content();
    sp = server.only().getSamplingParams();
    assertThat(sp.getMaxTokens()).isEqualTo(5);
    assertThat(sp.getStopList()).containsExactly("!");
    assertThat(sp.getTemperature()).isZero();
  }

  @Test
  void copyRoundTripsEveryFieldAndUnknownToolNamesFailBeforeAnyCall() {
    XinserveChatOptions all =
        EveryOption.builder()
            .toolNames(Set.of("lookup"))
            .internalToolExecutionEnabled(false)
            .toolContext("k", "v")
            .toolChoice("lookup")
            .parallelToolCalls(false)
            .build();
    assertThat((XinserveChatOptions) all.copy()).isEqualTo(all).isNotSameAs(all);
    assertThat(all.mutate().build()).isEqualTo(all);
    assertThat(all.copy().getToolChoice()).isEqualTo("lookup");
    assertThat(all.copy().getParallelToolCalls()).isFalse();
    assertThatThrownBy(() -> chat.prompt().user("q").toolNames("lookup").call().content())
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("lookup");
    assertThatThrownBy(
            () -> chat.prompt().user("q").options(ChatOptions.builder().maxTokens(2).build()).toolNames("lookup").call().content())
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("lookup");
    assertThat(server.requests).isEmpty();
  }
}
