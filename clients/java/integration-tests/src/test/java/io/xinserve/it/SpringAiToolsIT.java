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
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.MessageType;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.model.tool.ToolCallingManager;
import org.springframework.ai.model.tool.ToolExecutionResult;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.ai.support.ToolCallbacks;
import org.springframework.ai.tool.annotation.Tool;

/**
 * Spring AI tool calling ({@code @Tool} methods through {@code ChatClient} and {@code ChatModel})
 * on Spring AI 1.1 against the live server's built-in tiny model, which has no tool-call parser:
 * a forced tool choice makes it call the tool (structured output), the tool runs, its result goes
 * back and the model answers in text; the default ({@code auto}) is refused naming {@code
 * tool_choice}, before any tool runs.
 */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class SpringAiToolsIT {
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

  private static XinserveChatModel model(XinserveChatOptions.Builder options) {
    XinserveChatOptions o = options.temperature(0.0).build();
    if (o.getMaxTokens() == null) {
      o.setMaxTokens(256);
    }
    return new XinserveChatModel(grpc, o);
  }

  @Test
  void chatClientRunsTheToolTheModelIsMadeToCallAndAnswersInText() {
    BankTools tools = new BankTools();
    ChatClient chat = ChatClient.create(model(XinserveChatOptions.builder()));

    ChatResponse r =
        chat.prompt()
            .user("What is the balance of my current account?")
            .tools(tools)
            .options(XinserveChatOptions.builder().toolChoice("required").parallelToolCalls(false).build())
            .call()
            .chatResponse();

    assertThat(tools.asked).as("the tool ran once, with an argument of its schema").hasSize(1);
    AssistantMessage answer = r.getResult().getOutput();
    assertThat(answer.getToolCalls()).as("the last round answers in text").isEmpty();
    assertThat(answer.getText()).isNotNull().doesNotContain("\"accountBalance\"");
    assertThat(r.getResult().getMetadata().getFinishReason()).isIn("STOP", "LENGTH");
    assertThat(r.getMetadata().getUsage().getPromptTokens()).isPositive();
  }

  @Test
  void aNamedToolIsCalledWhileStreamingAndOnlyTheAnswerIsStreamed() {
    BankTools tools = new BankTools();
    ChatClient chat = ChatClient.builder(model(XinserveChatOptions.builder().toolChoice("accountBalance"))).defaultTools(tools).build();

    List<ChatResponse> chunks =
        chat.prompt().user("Balance of my savings account?").stream().chatResponse().collectList().block(Duration.ofSeconds(240));

    assertThat(tools.asked).hasSize(1);
    assertThat(chunks).isNotEmpty();
    assertThat(chunks)
        .as("no chunk carries tool calls or the forced JSON")
        .allSatisfy(
            c -> {
              assertThat(c.hasToolCalls()).isFalse();
              assertThat(c.getResults()).allSatisfy(g -> assertThat(g.getOutput().getText()).doesNotContain("\"account\""));
            });
  }

  @Test
  void withInternalToolExecutionOffTheCallerRunsTheToolsWithTheToolCallingManager() {
    BankTools tools = new BankTools();
    XinserveChatModel model = model(XinserveChatOptions.builder());
    XinserveChatOptions options =
        XinserveChatOptions.builder()
            .toolCallbacks(ToolCallbacks.from(tools))
            .toolChoice("accountBalance")
            .internalToolExecutionEnabled(false)
            .build();
    Prompt prompt = new Prompt("Balance of my current account?", options);

    ChatResponse calls = model.call(prompt);

    assertThat(tools.asked).as("nothing runs by itself").isEmpty();
    assertThat(calls.hasToolCalls()).isTrue();
    AssistantMessage.ToolCall call = calls.getResult().getOutput().getToolCalls().get(0);
    assertThat(call.name()).isEqualTo("accountBalance");
    assertThat(call.id()).startsWith("call_");
    assertThat(call.arguments()).containsPattern("\"account\"\\s*:\\s*\"(CURRENT|SAVINGS)\"");
    assertThat(calls.getResult().getOutput().getText()).isEmpty();

    ToolExecutionResult result = ToolCallingManager.builder().build().executeToolCalls(prompt, calls);
    assertThat(tools.asked).hasSize(1);
    assertThat(result.conversationHistory().get(result.conversationHistory().size() - 1))
        .isInstanceOfSatisfying(
            ToolResponseMessage.class, m -> assertThat(m.getResponses().get(0).id()).isEqualTo(call.id()));

    ChatResponse answer = model.call(new Prompt(result.conversationHistory(), options));
    assertThat(answer.hasToolCalls()).as("after tool results: text").isFalse();
    assertThat(answer.getResult().getOutput().getMessageType()).isEqualTo(MessageType.ASSISTANT);
    assertThat(tools.asked).hasSize(1);
  }

  @Test
  void aForcedCallCutByMaxTokensFailsAndNoToolRuns() {
    BankTools tools = new BankTools();
    ChatClient chat = ChatClient.create(model(XinserveChatOptions.builder().toolChoice("required").maxTokens(3)));

    assertThatThrownBy(() -> chat.prompt().user("What is the balance of my current account?").tools(tools).call().content())
        .isInstanceOf(NonTransientAiException.class)
        .hasMessageContaining("finish reason LENGTH")
        .hasMessageContaining("raise maxTokens");
    assertThat(tools.asked).isEmpty();
  }

  @Test
  void theDefaultAutoChoiceIsRefusedForAModelWithoutAToolCallParser() {
    BankTools tools = new BankTools();
    ChatClient chat = ChatClient.create(model(XinserveChatOptions.builder()));

    assertThatThrownBy(() -> chat.prompt().user("What is the balance of my current account?").tools(tools).call().content())
        .isInstanceOf(NonTransientAiException.class)
        .hasMessageContaining("tool_choice")
        .hasMessageContaining("toolChoice(\"required\")")
        .hasCauseInstanceOf(InvalidArgumentException.class);
    assertThatThrownBy(
            () -> chat.prompt().user("Balance?").tools(tools).stream().content().collectList().block(Duration.ofSeconds(120)))
        .isInstanceOf(NonTransientAiException.class)
        .hasMessageContaining("toolChoice(\"required\")");
    assertThat(tools.asked).as("never answered without the tool, never run").isEmpty();
  }
}
