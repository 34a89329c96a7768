package io.xinserve.bench;

import io.xinserve.client.ResponseStream;
import io.xinserve.client.RetryPolicy;
import io.xinserve.client.XinserveClient;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.SamplingParams;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Streams generations at a fixed concurrency and prints tokens/s as one JSON line.
 *
 * <p>Usage: {@code java -jar java-client-bench.jar TARGET [concurrency=32] [rounds=3]
 * [max_tokens=128] [model=xinserve-tiny-llama]}. Each round starts {@code concurrency} streams at
 * once (greedy, ignore_eos, max_tokens tokens each) and waits for all of them; two warm-up rounds
 * are not counted.
 */
public final class StreamingBench {
  private StreamingBench() {}

  public static void main(String[] args) throws Exception {
    String target = args.length > 0 ? args[0] : "dns:///127.0.0.1:50051";
    int concurrency = args.length > 1 ? Integer.parseInt(args[1]) : 32;
    int rounds = args.length > 2 ? Integer.parseInt(args[2]) : 3;
    int maxTokens = args.length > 3 ? Integer.parseInt(args[3]) : 128;
    String model = args.length > 4 ? args[4] : "xinserve-tiny-llama";
    GenerateRequest request = GenerateRequest.newBuilder()
        .setModel(model)
        .setPrompt("The quarterly report of the bank")
        .setSamplingParams(SamplingParams.newBuilder()
            .setTemperature(0f).setMaxTokens(maxTokens).setIgnoreEos(true))
        .build();
    var os = (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    try (XinserveClient client = XinserveClient.builder().target(target).plaintext()
        .retryPolicy(RetryPolicy.none()).build()) {
      round(client, request, concurrency); // warm-up: connections, JIT
      round(client, request, concurrency);
      List<Double> rates = new ArrayList<>();
      long cpu0 = os.getProcessCpuTime();
      long wall0 = System.nanoTime();
      long allTokens = 0;
      for (int r = 0; r < rounds; r++) {
        long t0 = System.nanoTime();
        long tokens = round(client, request, concurrency);
        double s = (System.nanoTime() - t0) / 1e9;
        rates.add(tokens / s);
        allTokens += tokens;
      }
      double wall = (System.nanoTime() - wall0) / 1e9;
      double cpu = (os.getProcessCpuTime() - cpu0) / 1e9;
      rates.sort(Double::compare);
      System.out.printf(Locale.ROOT,
          "{\"client\":\"java\",\"concurrency\":%d,\"rounds\":%d,\"max_tokens\":%d,"
              + "\"tokens\":%d,\"tokens_per_s\":%.1f,\"median_round_tokens_per_s\":%.1f,"
              + "\"client_cpu_s\":%.2f,\"wall_s\":%.2f}%n",
          concurrency, rounds, maxTokens, allTokens, allTokens / wall, rates.get(rates.size() / 2),
          cpu, wall);
    }
  }

  private static long round(XinserveClient client, GenerateRequest request, int concurrency)
      throws InterruptedException {
    AtomicLong tokens = new AtomicLong();
    CountDownLatch start = new CountDownLatch(1);
    CountDownLatch done = new CountDownLatch(concurrency);
    List<Throwable> errors = new ArrayList<>();
    for (int i = 0; i < concurrency; i++) {
      Thread t = new Thread(() -> {
        try {
          start.await();
          try (ResponseStream<GenerateStreamResponse> s = client.generateStream(request)) {
            for (GenerateStreamResponse d : s) {
              tokens.addAndGet(d.getTokenIdsCount());
            }
          }
        } catch (Throwable e) {
          synchronized (errors) {
            errors.add(e);
          }
        } finally {
          done.countDown();
        }
      });
      t.setDaemon(true);
      t.start();
    }
    start.countDown();
    done.await();
    if (!errors.isEmpty()) {
      throw new IllegalStateException(errors.size() + " streams failed", errors.get(0));
    }
    return tokens.get();
  }
}
