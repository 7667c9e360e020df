// Name lists for alphabet_sort (alphabet_sort.h).
//
// Derivation: common US given names (Social Security Administration popular-name
// lists) and surnames (US Census frequent surnames), plus well-known surnames of
// scientists, writers and statesmen, hand-picked, then kept only if the exact word
// is an entry of Debian's `wamerican` word list (/usr/share/dict/words, package
// wamerican 2020.12.07) written as one capital ASCII letter followed by lower-case
// ASCII letters (so "McDonald", "O'Brien", "Schrodinger" and names the list spells
// in lower case only, like "ohm", were dropped). Duplicates removed, sorted.
// 333 given names, 339 surnames. tests/rl/rl_alphabet_sort_test.cpp re-checks every
// entry against /usr/share/dict/words when that file exists.
#include "titan/rl/alphabet_sort.h"

namespace titan::rl {

namespace {

const std::string_view kFirstNames[] = {
    "Aaron", "Abigail", "Ada", "Adam", "Agnes", "Alan", "Albert", "Alexander", "Alexis", "Alice",
    "Allen", "Amanda", "Amber", "Amy", "Andrea", "Andrew", "Angela", "Ann", "Anna", "Anthony",
    "Arthur", "Ashley", "Austin", "Barbara", "Benjamin", "Betty", "Beverly", "Billy", "Bobby",
    "Boris", "Brandon", "Brenda", "Brian", "Brittany", "Bruce", "Bruno", "Bryan", "Caleb", "Carl",
    "Carlos", "Carmen", "Carol", "Carolyn", "Catherine", "Charles", "Charlotte", "Cheryl",
    "Chester", "Christian", "Christina", "Christine", "Christopher", "Clara", "Clarence", "Clyde",
    "Curtis", "Cynthia", "Daisy", "Dale", "Dana", "Daniel", "Danielle", "Dante", "David", "Dean",
    "Deborah", "Debra", "Denise", "Dennis", "Diana", "Diane", "Diego", "Dolly", "Donald", "Donna",
    "Doris", "Dorothy", "Douglas", "Dwight", "Dylan", "Earl", "Edgar", "Edith", "Edward", "Elena",
    "Eli", "Elijah", "Elizabeth", "Ella", "Elmer", "Emily", "Emma", "Eric", "Ernest", "Ethan",
    "Eugene", "Eva", "Evelyn", "Everett", "Ezra", "Felix", "Floyd", "Frances", "Francis", "Franco",
    "Frank", "Fred", "Gabriel", "Gary", "George", "Gerald", "Gilbert", "Gina", "Glenn", "Gloria",
    "Gordon", "Grace", "Gregory", "Greta", "Hannah", "Harold", "Harvey", "Hazel", "Heather",
    "Helen", "Henry", "Herbert", "Herman", "Holly", "Homer", "Horace", "Howard", "Hugo", "Ida",
    "Igor", "Ingrid", "Irene", "Iris", "Isaac", "Isabel", "Isabella", "Ivan", "Ivy", "Jack",
    "Jacob", "Jacqueline", "James", "Janet", "Janice", "Jason", "Jean", "Jeffrey", "Jennifer",
    "Jeremy", "Jerome", "Jerry", "Jesse", "Jessica", "Joan", "Joe", "John", "Johnny", "Jonathan",
    "Jordan", "Jorge", "Jose", "Joseph", "Joshua", "Joyce", "Juan", "Jude", "Judith", "Judy",
    "Julia", "Julie", "Justin", "Karen", "Katherine", "Kathleen", "Kathryn", "Kayla", "Keith",
    "Kelly", "Kenneth", "Kevin", "Kimberly", "Kyle", "Larry", "Laura", "Lauren", "Lawrence", "Lena",
    "Leo", "Leon", "Leonard", "Lester", "Levi", "Lily", "Linda", "Lisa", "Lloyd", "Logan", "Lola",
    "Louis", "Lucas", "Lucia", "Lucy", "Luigi", "Luis", "Luke", "Mabel", "Madison", "Marco",
    "Margaret", "Maria", "Marie", "Marilyn", "Mario", "Mark", "Martha", "Marvin", "Mary", "Mason",
    "Matthew", "Max", "Megan", "Melissa", "Melvin", "Michael", "Michelle", "Miguel", "Milton",
    "Molly", "Morris", "Nancy", "Natalie", "Nathan", "Neil", "Nelson", "Nicholas", "Nicole", "Nina",
    "Noah", "Nora", "Norman", "Olga", "Oliver", "Olivia", "Oscar", "Otto", "Owen", "Pablo",
    "Pamela", "Patricia", "Patrick", "Paul", "Pedro", "Perry", "Peter", "Philip", "Polly", "Rachel",
    "Ralph", "Randy", "Ray", "Raymond", "Rebecca", "Rex", "Richard", "Rita", "Robert", "Roger",
    "Romeo", "Ronald", "Rosa", "Rose", "Roy", "Ruby", "Rudolph", "Russell", "Ruth", "Ryan", "Sam",
    "Samantha", "Samuel", "Sandra", "Sara", "Sarah", "Scott", "Sean", "Sharon", "Shirley", "Sidney",
    "Silas", "Sofia", "Sonia", "Sophia", "Stanley", "Stella", "Stephanie", "Stephen", "Steven",
    "Stuart", "Susan", "Tanya", "Ted", "Teresa", "Terry", "Theresa", "Thomas", "Timothy", "Tina",
    "Tom", "Troy", "Tyler", "Vera", "Vernon", "Victor", "Victoria", "Vincent", "Violet", "Virginia",
    "Wallace", "Walter", "Warren", "Wayne", "Wendy", "Wesley", "Wilbur", "Willard", "William",
    "Willie", "Zachary",
};

const std::string_view kLastNames[] = {
    "Adams", "Aguilar", "Alexander", "Allen", "Alvarado", "Alvarez", "Ampere", "Anderson",
    "Andrews", "Archimedes", "Aristotle", "Armstrong", "Arnold", "Austen", "Bach", "Bailey",
    "Baker", "Balzac", "Barnes", "Bell", "Bennett", "Berry", "Black", "Bohr", "Borges", "Boyd",
    "Boyle", "Bradley", "Brahe", "Brooks", "Brown", "Bryant", "Burns", "Bush", "Butler", "Byron",
    "Caesar", "Campbell", "Carpenter", "Carroll", "Carter", "Castillo", "Castro", "Cervantes",
    "Chaucer", "Chavez", "Chekhov", "Chen", "Chopin", "Churchill", "Clark", "Clinton", "Cole",
    "Coleman", "Collins", "Columbus", "Contreras", "Cook", "Cooper", "Copernicus", "Cox",
    "Crawford", "Cruz", "Cunningham", "Curie", "Daniels", "Dante", "Darwin", "Davis", "Delgado",
    "Diaz", "Dickens", "Dirac", "Dixon", "Doppler", "Drake", "Dumas", "Duncan", "Dunn", "Edison",
    "Edwards", "Einstein", "Elliott", "Ellis", "Euclid", "Euler", "Evans", "Faraday", "Faulkner",
    "Ferguson", "Fermi", "Fernandez", "Fisher", "Flaubert", "Flores", "Ford", "Foster", "Fox",
    "Franklin", "Freeman", "Frost", "Galileo", "Garcia", "Gardner", "Garza", "Gauss", "Gibson",
    "Goethe", "Gogol", "Gomez", "Gonzales", "Gonzalez", "Gordon", "Graham", "Grant", "Gray",
    "Green", "Griffin", "Gutierrez", "Guzman", "Hall", "Halley", "Hamilton", "Hansen", "Harris",
    "Harrison", "Hart", "Hawking", "Hawkins", "Hayes", "Heisenberg", "Hemingway", "Henderson",
    "Henry", "Hernandez", "Herrera", "Herschel", "Hertz", "Hicks", "Hill", "Hoffman", "Holmes",
    "Homer", "Hooke", "Howard", "Hubble", "Hudson", "Hughes", "Hugo", "Hunt", "Hunter", "Huxley",
    "Ibsen", "Jackson", "James", "Jefferson", "Jenkins", "Jimenez", "Johnson", "Johnston", "Jones",
    "Jordan", "Joule", "Joyce", "Kafka", "Keats", "Kelley", "Kelly", "Kelvin", "Kennedy", "Kepler",
    "Kim", "King", "Knight", "Lane", "Lawrence", "Lee", "Lewis", "Lincoln", "Long", "Lopez",
    "Madison", "Magellan", "Marshall", "Martin", "Martinez", "Mason", "Matthews", "Maxwell",
    "Medina", "Mendel", "Mendez", "Mendoza", "Meyer", "Miller", "Mills", "Milton", "Mitchell",
    "Monroe", "Moore", "Morales", "Moreno", "Morgan", "Morris", "Morse", "Mozart", "Munoz",
    "Murphy", "Murray", "Myers", "Nabokov", "Napoleon", "Nelson", "Neruda", "Newton", "Nguyen",
    "Nichols", "Nixon", "Nobel", "Obama", "Olson", "Ortiz", "Orwell", "Owens", "Palmer", "Parker",
    "Pascal", "Pasteur", "Patel", "Patterson", "Pauli", "Payne", "Pena", "Perez", "Perkins",
    "Perry", "Peters", "Peterson", "Phillips", "Pierce", "Planck", "Plato", "Poe", "Porter",
    "Powell", "Price", "Proust", "Ptolemy", "Pushkin", "Raleigh", "Ramirez", "Ramos", "Ray",
    "Reagan", "Reed", "Reyes", "Reynolds", "Rice", "Richards", "Richardson", "Riley", "Rivera",
    "Roberts", "Robertson", "Robinson", "Rodriguez", "Rogers", "Romero", "Rose", "Ross", "Ruiz",
    "Russell", "Ryan", "Sagan", "Salazar", "Sanchez", "Sanders", "Sandoval", "Santos", "Schiller",
    "Schmidt", "Scott", "Shaw", "Shelley", "Silva", "Simmons", "Simpson", "Smith", "Snyder",
    "Socrates", "Soto", "Spencer", "Stephens", "Stevens", "Stewart", "Stone", "Sullivan", "Taylor",
    "Tesla", "Thomas", "Thompson", "Tolstoy", "Torres", "Tran", "Truman", "Tucker", "Turing",
    "Turner", "Twain", "Vargas", "Vasquez", "Vazquez", "Verne", "Virgil", "Volta", "Wagner",
    "Walker", "Wallace", "Ward", "Warren", "Washington", "Watson", "Watt", "Weaver", "Webb",
    "Wells", "West", "White", "Whitman", "Wilde", "Williams", "Willis", "Wilson", "Wood", "Woods",
    "Wright", "Yeats", "Young", "Zola",
};

}  // namespace

std::span<const std::string_view> alphabet_first_names() { return kFirstNames; }
std::span<const std::string_view> alphabet_last_names() { return kLastNames; }

}  // namespace titan::rl
