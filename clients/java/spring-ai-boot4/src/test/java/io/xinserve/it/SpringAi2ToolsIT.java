package io.xinserve.it;

import static io.xinserve.it.LiveServers.TINY;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.InvalidArgumentException;
import io.xinserve.spring.ai.XinserveChatModel;
import io.xinserve.spring.ai.XinserveChatOptions;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.ai.support.ToolCallbacks;
import org.springframework.ai.tool.annotation.Tool;

/**
 * Spring AI 2.0 tool calling against the live server's built-in tiny model (no tool-call parser):
 * {@code ChatClient}'s ToolCallingAdvisor runs the {@code @Tool} the model is made to call and the
 * model answers in text, call and stream; {@code ChatModel.call} alone returns the tool calls; the
 * default {@code auto} is refused naming {@code tool_choice}.
 */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class SpringAi2ToolsIT {
  private static XinserveClient grpc;

  @BeforeAll
  static void connect() {
    grpc = LiveServers.get().plainClient().defaultModel(TINY).unaryDeadline(Duration.ofSeconds(120)).build();
  }

  @AfterAll
  static void disconnect() {
    grpc.close();
  }

  enum Account {
    CURRENT,
    SAVINGS
  }

  static final class BankTools {
    final List<Account> asked = new CopyOnWriteArrayList<>();

    @Tool(description = "The balance of one of the customer's accounts, in yuan")
    String accountBalance(Account account) {
      asked.add(account);
      return account == Account.CURRENT ? "1000" : "25000";
    }
  }

  private static ChatClient chat() {
    return ChatClient.create(
        new XinserveChatModel(grpc, XinserveChatOptions.builder().temperature(0.0).maxTokens(256).build()));
  }

  @Test
  void chatClientRunsTheToolOfAPerCallRequiredChoiceAndAnswersInText() {
    BankTools tools = new BankTools();

    ChatResponse r =
        chat()
            .prompt()
            .user("What is the balance of my current account?")
            .tools(tools)
            .options(XinserveChatOptions.builder().toolChoice("required").parallelToolCalls(false))
            .call()
            .chatResponse();

    assertThat(tools.asked).hasSize(1);
    assertThat(r.hasToolCalls()).isFalse();
    assertThat(r.getResult().getOutput().getText()).isNotNull().doesNotContain("\"accountBalance\"");
  }

  @Test
  void chatClientStreamsTheAnswerAfterANamedTool() {
    BankTools tools = new BankTools();

    List<ChatResponse> chunks =
        chat()
            .prompt()
            .user("Balance of my savings account?")
            .tools(tools)
            .options(XinserveChatOptions.builder().toolChoice("accountBalance"))
            .stream()
            .chatResponse()
            .collectList()
            .block(Duration.ofSeconds(240));

    assertThat(tools.asked).hasSize(1);
    assertThat(chunks).isNotEmpty().noneMatch(ChatResponse::hasToolCalls);
  }

  @Test
  void chatModelCallAloneReturnsTheToolCalls() {
    BankTools tools = new BankTools();
    XinserveChatModel model = new XinserveChatModel(grpc, XinserveChatOptions.builder().temperature(0.0).maxTokens(256).build());

    ChatResponse r =
        model.call(
            new Prompt(
                "Balance of my current account?",
                XinserveChatOptions.builder().toolCallbacks(ToolCallbacks.from(tools)).toolChoice("accountBalance").build()));

    assertThat(r.hasToolCalls()).isTrue();
    assertThat(r.getResult().getOutput().getToolCalls().get(0).arguments())
        .containsPattern("\"account\"\\s*:\\s*\"(CURRENT|SAVINGS)\"");
    assertThat(tools.asked).as("the caller runs the tools").isEmpty();
  }

  @Test
  void theDefaultAutoChoiceIsRefusedForAModelWithoutAToolCallParser() {
    BankTools tools = new BankTools();

    assertThatThrownBy(() -> chat().prompt().user("What is my balance?").tools(tools).call().content())
        .isInstanceOf(NonTransientAiException.class)
        .hasMessageContaining("toolChoice(\"required\")")
        .hasCauseInstanceOf(InvalidArgumentException.class);
    assertThat(tools.asked).isEmpty();
  }
}
