package io.xinserve.spring.ai;

import static org.assertj.core.api.Assertions.assertThat;

import io.xinserve.v1.ToolCall;
import io.xinserve.v1.ToolChoiceMode;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.tool.annotation.Tool;

/**
 * Spring AI 2.0's {@code ChatClient} merges {@code chatModel.getOptions().mutate().combineWith(
 * perCallBuilder)}: every xinserve option given per call reaches the server, over the model's
 * defaults; per-call tools and tool choice are run by its ToolCallingAdvisor.
 */
@Timeout(60)
class ChatClientOptionsSpringAi2Test {
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
    chat.prompt().user("q").options(EveryOption.builder()).call().content();
    EveryOption.assertSent(server.only());
    server.requests.clear();
    chat.prompt().user("q").options(EveryOption.builder()).stream().content().collectList().block(Duration.ofSeconds(30));
    EveryOption.assertSent(server.only());
  }

  @Test
  void perCallOptionsOverrideTheDefaultsFieldByField() {
    chat.prompt().user("q").options(XinserveChatOptions.builder().maxTokens(3).seed(7L)).call().content();
    var sp = server.only().getSamplingParams();
    assertThat(sp.getMaxTokens()).isEqualTo(3);
    assertThat(sp.getSeed()).isEqualTo(7L);
    assertThat(sp.getTemperature()).as("the model's default kept").isZero();
    server.requests.clear();
    chat.prompt().user("q").options(ChatOptions.builder().maxTokens(5).stopSequences(List.of("!"))).call().content();
    sp = server.only().getSamplingParams();
    assertThat(sp.getMaxTokens()).isEqualTo(5);
    assertThat(sp.getStopList()).containsExactly("!");
    assertThat(sp.getTemperature()).isZero();
  }

  @Test
  void mutateAndBuildRoundTripEveryField() {
    XinserveChatOptions all =
        EveryOption.builder()
            .internalToolExecutionEnabled(false)
            .toolContext("k", "v")
            .toolChoice("lookup")
            .parallelToolCalls(false)
            .build();
    assertThat(all.mutate().build()).isEqualTo(all).isNotSameAs(all);
    assertThat(all.mutate().build().getToolChoice()).isEqualTo("lookup");
    assertThat(all.copy()).isEqualTo(all);
    assertThat(XinserveChatOptions.builder().combineWith(all.mutate()).build()).isEqualTo(all);
  }

  static final class Lookup {
    final List<String> keys = new CopyOnWriteArrayList<>();

    @Tool(description = "Looks a key up")
    String lookup(String key) {
      keys.add(key);
      return "found";
    }
  }

  @Test
  void aPerCallToolChoiceBuilderAndToolsRunThroughTheToolCallingAdvisor() {
    server.toolCall =
        ToolCall.newBuilder().setId("call_9").setName("lookup").setArguments("{\"key\": \"k\"}").build();
    server.reply = "done";
    Lookup tools = new Lookup();

    String answer =
        chat.prompt()
            .user("q")
            .tools(tools)
            .options(XinserveChatOptions.builder().toolChoice("lookup").parallelToolCalls(false))
            .call()
            .content();

    assertThat(answer).isEqualTo("done");
    assertThat(tools.keys).containsExactly("k");
    assertThat(server.requests).hasSize(2);
    assertThat(server.requests.get(0).getToolChoice().getFunctionName()).isEqualTo("lookup");
    assertThat(server.requests.get(0).getParallelToolCalls()).isFalse();
    assertThat(server.requests.get(0).getSamplingParams().getMaxTokens()).as("the model's default kept").isEqualTo(64);
    assertThat(server.requests.get(1).getToolChoice().getMode()).isEqualTo(ToolChoiceMode.TOOL_CHOICE_MODE_NONE);
  }
}
