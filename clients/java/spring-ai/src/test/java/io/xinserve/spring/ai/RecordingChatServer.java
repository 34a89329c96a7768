package io.xinserve.spring.ai;

import io.grpc.Server;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import io.xinserve.client.XinserveClient;
import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.ChatStreamResponse;
import io.xinserve.v1.CompletionOutput;
import io.xinserve.v1.FinishReason;
import io.xinserve.v1.InferenceServiceGrpc;
import io.xinserve.v1.ToolCall;
import io.xinserve.v1.ToolChoiceMode;
import java.io.IOException;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/**
 * An in-process xinserve Chat/ChatStream servicer that records every request and answers {@link
 * #reply} (unary: one output; stream: one delta), with a client on it whose default model is
 * {@code tiny}. With {@link #toolCall} set, a request whose {@code tool_choice} is not {@code
 * none} is answered with that tool call (its JSON as the text, as the server's forced output).
 */
final class RecordingChatServer implements AutoCloseable {
  final List<ChatRequest> requests = new CopyOnWriteArrayList<>();
  volatile String reply = "ok";
  volatile ToolCall toolCall;
  final XinserveClient client;
  private final Server server;

  RecordingChatServer() throws IOException {
    String name = InProcessServerBuilder.generateName();
    server =
        InProcessServerBuilder.forName(name)
            .addService(
                new InferenceServiceGrpc.InferenceServiceImplBase() {
                  @Override
                  public void chat(ChatRequest r, StreamObserver<io.xinserve.v1.ChatResponse> out) {
                    requests.add(r);
                    ToolCall call = callFor(r);
                    CompletionOutput.Builder output =
                        CompletionOutput.newBuilder().setFinishReason(FinishReason.FINISH_REASON_STOP);
                    if (call == null) {
                      output.setText(reply);
                    } else {
                      output.setText(json(call)).addToolCalls(call);
                    }
                    out.onNext(
                        io.xinserve.v1.ChatResponse.newBuilder().setRequestId("rid").addOutputs(output).build());
                    out.onCompleted();
                  }

                  @Override
                  public void chatStream(ChatRequest r, StreamObserver<ChatStreamResponse> out) {
                    requests.add(r);
                    ToolCall call = callFor(r);
                    if (call == null) {
                      out.onNext(
                          ChatStreamResponse.newBuilder()
                              .setText(reply)
                              .setFinishReason(FinishReason.FINISH_REASON_STOP)
                              .build());
                    } else {
                      String text = json(call);
                      int half = text.length() / 2;
                      out.onNext(ChatStreamResponse.newBuilder().setText(text.substring(0, half)).build());
                      out.onNext(
                          ChatStreamResponse.newBuilder()
                              .setText(text.substring(half))
                              .setFinishReason(FinishReason.FINISH_REASON_STOP)
                              .addToolCalls(call)
                              .build());
                    }
                    out.onCompleted();
                  }
                })
            .build()
            .start();
    client =
        XinserveClient.builder()
            .channelBuilder(InProcessChannelBuilder.forName(name))
            .defaultModel("tiny")
            .build();
  }

  private ToolCall callFor(ChatRequest r) {
    ToolCall call = toolCall;
    if (call == null
        || r.getToolsCount() == 0
        || r.getToolChoice().getMode() == ToolChoiceMode.TOOL_CHOICE_MODE_NONE) {
      return null;
    }
    return call;
  }

  private static String json(ToolCall call) {
    return "[{\"name\": \"" + call.getName() + "\", \"parameters\": " + call.getArguments() + "}]";
  }

  /** @return the only request received */
  ChatRequest only() {
    if (requests.size() != 1) {
      throw new AssertionError("expected one request, got " + requests.size() + ": " + requests);
    }
    return requests.get(0);
  }

  @Override
  public void close() throws InterruptedException {
    client.close();
    server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
  }
}
