package io.xinserve.bench;

import io.xinserve.client.ResponseStream;
import io.xinserve.client.RetryPolicy;
import io.xinserve.client.XinserveClient;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.GenerateStreamResponse;
import io.xinserve.v1.SamplingParams;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Closed-loop load generator for {@code InferenceService.GenerateStream}, driven over stdin by
 * benchmarks/serving_throughput.py (its {@code java} client).
 *
 * <p>Usage: {@code java -cp java-client-bench.jar io.xinserve.bench.LoadGen TARGET MODEL
 * PROMPTS_FILE MAX_TOKENS SEED}. PROMPTS_FILE holds one prompt per line (UTF-8); request {@code i}
 * uses prompt {@code i % count}. Every request is greedy ({@code temperature} 0), {@code
 * ignore_eos}, exactly MAX_TOKENS tokens (a stream with another count is an error). One channel
 * (the SDK's {@code XinserveClient}, plaintext, no retries, a 600 s stream deadline) serves
 * every request.
 *
 * <p>Protocol: prints {@code READY} once connected; then for each stdin line {@code N TOTAL} runs
 * TOTAL requests over N threads, each sending its next request when the previous stream ended,
 * and prints one JSON line {@code {"tokens":int,"wall_s":float,"ttft_s":[float...],
 * "errors":[str...]}} (TTFT: request sent to first message carrying token ids, seconds). EOF on
 * stdin ends the process.
 */
public final class LoadGen {
  private LoadGen() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: LoadGen TARGET MODEL PROMPTS_FILE MAX_TOKENS SEED");
      System.exit(2);
    }
    String target = args[0];
    String model = args[1];
    List<String> prompts = Files.readAllLines(Path.of(args[2]), StandardCharsets.UTF_8);
    int maxTokens = Integer.parseInt(args[3]);
    long seed = Long.parseLong(args[4]);
    SamplingParams params = SamplingParams.newBuilder()
        .setTemperature(0f).setMaxTokens(maxTokens).setIgnoreEos(true).setSeed(seed).build();
    List<GenerateRequest> requests = new ArrayList<>();
    for (String p : prompts) {
      requests.add(GenerateRequest.newBuilder()
          .setModel(model).setPrompt(p).setSamplingParams(params).build());
    }
    try (XinserveClient client = XinserveClient.builder().target(target).plaintext()
            .retryPolicy(RetryPolicy.none()).streamDeadline(Duration.ofSeconds(600)).build();
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
      System.out.println("READY");
      System.out.flush();
      String line;
      while ((line = in.readLine()) != null) {
        String[] f = line.trim().split("\\s+");
        if (f.length != 2) {
          continue;
        }
        System.out.println(
            run(client, requests, maxTokens, Integer.parseInt(f[0]), Integer.parseInt(f[1])));
        System.out.flush();
      }
    }
  }

  private static String run(XinserveClient client, List<GenerateRequest> requests, int maxTokens,
      int workers, int total) throws InterruptedException {
    AtomicInteger next = new AtomicInteger();
    AtomicLong tokens = new AtomicLong();
    double[] ttft = new double[total];
    List<String> errors = new ArrayList<>();
    List<Thread> threads = new ArrayList<>();
    long t0 = System.nanoTime();
    for (int w = 0; w < workers; w++) {
      Thread t = new Thread(() -> {
        int i;
        while ((i = next.getAndIncrement()) < total) {
          long sent = System.nanoTime();
          long first = 0;
          int got = 0;
          try (ResponseStream<GenerateStreamResponse> s =
              client.generateStream(requests.get(i % requests.size()))) {
            for (GenerateStreamResponse d : s) {
              int n = d.getTokenIdsCount();
              if (n > 0 && first == 0) {
                first = System.nanoTime();
              }
              got += n;
            }
            if (got != maxTokens) {
              throw new IllegalStateException("got " + got + " tokens, expected " + maxTokens);
            }
            tokens.addAndGet(got);
            ttft[i] = (first - sent) / 1e9;
          } catch (Throwable e) {
            ttft[i] = -1;
            synchronized (errors) {
              errors.add(e.getClass().getSimpleName() + ": " + e.getMessage());
            }
          }
        }
      });
      t.setDaemon(true);
      t.start();
      threads.add(t);
    }
    for (Thread t : threads) {
      t.join();
    }
    return result(tokens.get(), (System.nanoTime() - t0) / 1e9, ttft, errors);
  }

  /** One measurement as the JSON line of the stdin protocol; a negative TTFT marks a failed call. */
  static String result(long tokens, double wall, double[] ttft, List<String> errors) {
    StringBuilder out = new StringBuilder();
    out.append(String.format(Locale.ROOT, "{\"tokens\":%d,\"wall_s\":%.6f,\"ttft_s\":[",
        tokens, wall));
    boolean firstItem = true;
    for (double v : ttft) {
      if (v < 0) {
        continue;
      }
      out.append(firstItem ? "" : ",").append(String.format(Locale.ROOT, "%.6f", v));
      firstItem = false;
    }
    out.append("],\"errors\":[");
    for (int k = 0; k < errors.size(); k++) {
      String e = errors.get(k);
      if (e.length() > 200) {
        e = e.substring(0, 200);
      }
      out.append(k == 0 ? "" : ",").append('"').append(jsonEscape(e)).append('"');
    }
    return out.append("]}").toString();
  }

  private static String jsonEscape(String s) {
    StringBuilder b = new StringBuilder();
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.toString();
  }
}
